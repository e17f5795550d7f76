"""A change of request while a step waits on the person (an approval it asked for, or a question
it put), on every executor, through the real command line as a person runs it.

The step that asked was working on what the change made invalid: the request is withdrawn (the
page no longer lists it under "Waiting on you", an approval given later would bind a payload the
step no longer sends), the waiting call is answered "not run", the step is redone in its new round
and asks again, and the session goes on to Succeeded once the new question is answered. Before,
the harness kept waiting on the withdrawn question and the page kept asking it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.executors.endpoints import PROVIDERS
from belay.journal.events import ToolResultEvent
from tests.belay_cli import kill_group, read_events, run_belay, start_belay, stop_session_standins
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

HANG_S = 300.0  # a guard against a hang, never a timing
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
SESSION = "retry-timeout"
EXECUTORS = ["scripted", "openai-agents", "anthropic-managed"]

# Each way a step asks the person: the call, and the command that answers it.
ASKING = {
    "approval": (
        {"tool": "request_approval", "arguments": {"summary": "file the patch upstream"}},
        "approve",
    ),
    "question": ({"tool": "wait_on_user", "arguments": {"reason": "which release gets the fix?"}}, "answer"),
}


def plan(asking: dict[str, Any]) -> dict[str, Any]:
    return {
        "subagents": {
            "worker": {
                "steps": [
                    {
                        "id": "patch",
                        "title": "Write the patch",
                        "actions": [
                            {
                                "tool": "run_command",
                                "arguments": {
                                    "command": "mkdir -p out && echo '+deadline once' > out/fix.patch"
                                },
                            }
                        ],
                    },
                    {"id": "ask", "title": "Ask the person", "actions": [asking]},
                    {
                        "id": "publish",
                        "title": "Publish the patch",
                        "verify": {"command": "test -s out/fix.patch", "exit_code": 0},
                        "actions": [
                            {
                                "tool": "publish_deliverable",
                                "arguments": {"path": "out/fix.patch", "name": "fix.patch"},
                            }
                        ],
                    },
                ]
            }
        }
    }


def manifest(directory: Path, executor: str, asking: dict[str, Any]) -> Path:
    directory.mkdir()
    (directory / "plan.yaml").write_text(yaml.safe_dump(plan(asking), sort_keys=False))
    executor_spec: dict[str, Any] = {"type": executor, "plan": "plan.yaml"}
    if executor != "scripted":
        executor_spec["model"] = "gpt-5"
    data = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": SESSION},
        "spec": {
            "request": {"goal": "Make the retries honour a timeout.", "parts": {"core": "the retry loop"}},
            "executor": executor_spec,
            "subagents": [{"name": "worker", "role": "Writes the patch.", "networkProfile": "none"}],
        },
    }
    path = directory / "session.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def brief(home: Path) -> dict[str, Any]:
    shown = run_belay(home, "brief", "--json", SESSION)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def asked(home: Path) -> list[str]:
    """What the page says waits on the person: approval and wait ids."""
    if not (home / "sessions" / SESSION).exists():
        return []
    shown = run_belay(home, "brief", "--json", SESSION)
    if shown.returncode != 0:
        return []
    return [item["id"] for item in json.loads(shown.stdout)["waiting_on_you"]]


def answer(home: Path, command: str, item: str) -> subprocess.CompletedProcess[str]:
    extra = ("the next minor release",) if command == "answer" else ()
    return run_belay(home, command, SESSION, item, *extra)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("way", sorted(ASKING))
def test_an_amend_while_a_step_waits_on_you_withdraws_the_question_and_redoes_the_step(
    tmp_path: Path, executor: str, way: str
) -> None:
    asking, command = ASKING[way]
    home = tmp_path / "home"
    run = start_belay(
        home, "run", "--quiet", str(manifest(tmp_path / "m", executor, asking)), environment=NO_PROVIDER
    )
    try:
        [first] = wait_until(
            lambda: asked(home), "the step to ask the person", timeout=HANG_S, while_running=run
        )
        amended = run_belay(
            home, "amend", SESSION, "--part", "core=the retry loop, which also logs each retry"
        )
        assert amended.returncode == 0, amended.stderr
        assert "worker/ask" in amended.stdout, amended.stdout
        # The question asked on the invalid work is no longer asked; the redone step asks anew.
        [again] = wait_until(
            lambda: [i for i in asked(home) if i != first],
            "the redone step to ask",
            timeout=HANG_S,
            while_running=run,
        )
        assert first not in asked(home)
        late = answer(home, command, first)
        assert late.returncode != 0, late.stdout  # the withdrawn question takes no answer
        answered = answer(home, command, again)
        assert answered.returncode == 0, answered.stderr
        wait_until(run.poll, "the run to end", timeout=HANG_S, until=lambda code: code is not None)
        assert run.returncode == 0, run.returncode
        shown = brief(home)
        assert shown["phase"] == "Succeeded", shown["phase"]
        [ask] = [s for s in shown["steps"] if s["task_id"] == "worker/ask"]
        assert ask["round"] == 2, ask
        results = [e.payload for e in read_events(home, SESSION) if isinstance(e, ToolResultEvent)]
        not_run = [r for r in results if not r.ok and (r.error or "").startswith("not run: ")]
        assert len(not_run) == (1 if way == "approval" else 0), not_run
    finally:
        if run.poll() is None:
            kill_group(run)
        stop_session_standins(home)
