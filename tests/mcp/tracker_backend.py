"""The tracker behind the test MCP server: an HTTP service on loopback that counts every issue it
opens in a file (one JSON line each), answers searches, and says which tools the MCP server offers.
`delay_s` holds the answer to an open after it is counted: the window a kill lands in."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ALL_TOOLS = ("open_issue", "find_issues", "label_issue")


@dataclass
class Tracker:
    log: Path
    url: str = ""
    delay_s: float = 0.0
    offered: list[str] = field(default_factory=lambda: list(ALL_TOOLS))
    # A credential the tracker lets slip into every answer to an open, as a careless one would.
    leak: str = ""

    def issues(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    @property
    def opened(self) -> int:
        return len(self.issues())


@contextmanager
def running_tracker(log: Path) -> Iterator[Tracker]:
    tracker = Tracker(log)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/offered":
                self.answer(tracker.offered)
            else:
                title = parse_qs(url.query).get("title", [""])[0]
                self.answer([i for i in tracker.issues() if i["title"] == title])

        def do_POST(self) -> None:
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                issue = {"id": f"ISSUE-{tracker.opened + 1}", "title": asked["title"], "body": asked["body"]}
                with tracker.log.open("a") as log:
                    log.write(json.dumps(issue) + "\n")
            time.sleep(tracker.delay_s)
            self.answer({**issue, "note": f"opened with token {tracker.leak}"} if tracker.leak else issue)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tracker.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tracker
    finally:
        server.shutdown()
        server.server_close()
