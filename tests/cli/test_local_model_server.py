"""A local model server, as a person points `belay` at one: no key (`executor.baseURL` alone), and
no `GET /v1/models/{id}` route (llama.cpp's `llama-server` has only the list). `belay run` reaches
it, and `belay resume --executor openai --model X` is not refused for the missing route.

The server here is a loopback stand-in answering as `llama-server` does (its Responses and Models
wire shapes, 404 `File Not Found` for a route it lacks). It decides nothing: it checks only what
Belay sends and how Belay reads the answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.journal.events import ExecutorChange
from tests.belay_cli import read_events, run_belay
from tests.cli.test_executor_change import killed_inside_a_step, no_key_environment
from tests.harness.example import SESSION
from tests.harness.test_openai_executor import call, message
from tests.models.test_openai_responses import response_body

LISTED = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


@dataclass
class LlamaServerLike:
    url: str = ""
    has_list: bool = True
    replies: list[list[dict[str, Any]]] = field(default_factory=list)
    # The model call refused (as a server that wants a key does): the attempt after a move ends
    # there, without the session waiting on a person for a deliverable the server never writes.
    refuse_calls: bool = False
    asked: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # method, path, headers


@pytest.fixture
def server() -> Iterator[LlamaServerLike]:
    state = LlamaServerLike()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def answer(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            state.asked.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path == "/v1/models" and state.has_list:
                listing = {
                    "object": "list",
                    "data": [{"id": LISTED, "object": "model", "owned_by": "llamacpp"}],
                }
                return self.answer(200, json.dumps(listing).encode(), "application/json")
            self.answer(404, b"File Not Found", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            state.asked.append(("POST", self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path != "/v1/responses":
                return self.answer(404, b"File Not Found", "text/plain")
            if state.refuse_calls:
                refused = {
                    "error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
                }
                return self.answer(401, json.dumps(refused).encode(), "application/json")
            output = state.replies.pop(0) if state.replies else [message("Nothing more to do.")]
            self.answer(200, json.dumps(response_body(output, model=LISTED)).encode(), "application/json")

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{http.server_address[1]}/v1"
    yield state
    http.shutdown()
    http.server_close()


def test_belay_run_reaches_a_keyless_server_named_by_base_url_alone(
    server: LlamaServerLike, tmp_path: Path
) -> None:
    server.replies = [
        [call("call_1", "write_file", {"path": "out/answer.txt", "content": "42\n"})],
        [call("call_2", "publish_deliverable", {"path": "out/answer.txt", "name": "answer.txt"})],
        [message("Published answer.txt.")],
    ]
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "keyless"},
        "spec": {
            "request": {"goal": "Write the answer to out/answer.txt and publish it."},
            "executor": {"type": "openai", "model": "local", "baseURL": server.url},
            "subagents": [{"name": "solo", "deliverable": "answer.txt", "declared": ["out/*"]}],
        },
    }
    path = tmp_path / "session.yaml"
    path.write_text(yaml.safe_dump(manifest))
    home = tmp_path / "home"
    result = run_belay(home, "run", "--quiet", str(path), environment=no_key_environment())
    assert result.returncode == 0, result.stderr[-2000:]
    posts = [headers for method, _, headers in server.asked if method == "POST"]
    assert len(posts) == 3
    # A placeholder, never a key of this machine's: there is none here to leak.
    assert {h.get("authorization") for h in posts} == {"Bearer belay-no-key"}


@pytest.mark.parametrize("has_list", [True, False], ids=["with-the-list", "without-any-models-route"])
def test_a_move_to_a_server_without_the_model_route_is_not_refused(
    server: LlamaServerLike, tmp_path: Path, has_list: bool
) -> None:
    server.has_list, server.refuse_calls = has_list, True
    home = killed_inside_a_step(tmp_path / "home")
    environment = {**no_key_environment(), "OPENAI_BASE_URL": server.url}
    result = run_belay(
        home, "resume", SESSION, "--executor", "openai", "--model", "qwen05", environment=environment
    )
    assert "does not know model" not in result.stderr, result.stderr[-2000:]
    # Asked once for the model, once for the list; said in one line what could not be checked.
    gets = [path for method, path, _ in server.asked if method == "GET"]
    assert gets == ["/v1/models/qwen05", "/v1/models"]
    [said] = [line for line in result.stderr.splitlines() if "could not check model 'qwen05'" in line]
    assert (LISTED in said) == has_list, said
    [move] = [e.payload for e in read_events(home, SESSION) if isinstance(e.payload, ExecutorChange)]
    assert (move.to_type, move.to_model) == ("openai", "qwen05")
    assert any(method == "POST" for method, _, _ in server.asked)  # the next attempt asked the server


def test_a_model_the_server_lists_is_known_without_a_word(server: LlamaServerLike, tmp_path: Path) -> None:
    server.refuse_calls = True
    home = killed_inside_a_step(tmp_path / "home")
    environment = {**no_key_environment(), "OPENAI_BASE_URL": server.url}
    result = run_belay(
        home, "resume", SESSION, "--executor", "openai", "--model", LISTED, environment=environment
    )
    assert "could not check" not in result.stderr and "does not know" not in result.stderr, result.stderr[
        -2000:
    ]
    assert [e for e in read_events(home, SESSION) if isinstance(e.payload, ExecutorChange)]
