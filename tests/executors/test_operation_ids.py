"""Operation ids mean the same on every executor: the same plan, run by the scripted model and by
each managed executor's remote agent (on its local stand-in), records the same operation ids with
the same payload hashes, so the parser-fix manifest's declarative approval of
`implementer.publish.3` covers the managed publish, and never a payload one byte off."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from belay.api.agentsession import parse_manifest
from belay.harness.models.scripted import ScriptedPlan, load_plan
from belay.journal.events import ApprovalEvent, Event, ToolRequestEvent
from belay.local.runtime import LocalHome, read_state, run_local
from tests.belay_cli import StandinProcess, kill_group, manifest_for, read_events, run_belay, start_belay
from tests.executors.example import standin_for
from tests.harness.example import EXAMPLE, MANIFEST, SESSION
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow
QUIET_S = 2.0

EXECUTORS = ("self-hosted", "openai-agents", "anthropic-managed")
PUBLISH = "implementer.publish.3"
APPROVAL = f"approve-{PUBLISH}"

# A step whose actions frame a step of their own: the ids the harness derives are not the plan's
# positions (`outer.1` is the update_plan that starts `inner`), so the scripted model must find
# its calls through the provider call ids the record keeps.
NESTED = {
    "subagents": {
        "worker": {
            "steps": [
                {
                    "id": "outer",
                    "title": "A step with a step inside",
                    "actions": [
                        {"tool": "update_plan", "arguments": {"step": "inner", "status": "running"}},
                        {"tool": "run_command", "arguments": {"command": "echo inside"}},
                        {"tool": "update_plan", "arguments": {"step": "inner", "status": "done"}},
                        {"tool": "write_file", "arguments": {"path": "out/result.txt", "content": "42\n"}},
                        {"tool": "publish_deliverable", "arguments": {"path": "out/result.txt"}},
                    ],
                }
            ]
        }
    }
}


async def run_on(
    executor: str, manifest: dict[str, Any], plan: ScriptedPlan, home: Path, monkeypatch: pytest.MonkeyPatch
) -> list[Event]:
    """The manifest run to its end on `executor` in this process (a managed one on its stand-in)."""
    session = parse_manifest(manifest)
    local = LocalHome(home)
    if executor == "self-hosted":
        result = await run_local(local, session)
    else:
        async with standin_for(executor, plan, monkeypatch):
            result = await run_local(local, session)
    assert result.completed, f"{executor}: {result.detail}"
    _, events = await read_state(local, session.session_id)
    return events


def requests(events: list[Event]) -> dict[str, tuple[str, str]]:
    return {
        e.payload.operation_id: (e.payload.tool, e.payload.payload_sha256)
        for e in events
        if isinstance(e, ToolRequestEvent)
    }


def provider_ids(events: list[Event]) -> dict[str, str | None]:
    return {
        e.payload.operation_id: e.payload.provider_call_id for e in events if isinstance(e, ToolRequestEvent)
    }


async def test_the_example_records_the_same_operations_on_every_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = yaml.safe_load(MANIFEST.read_text())
    plan = load_plan(EXAMPLE / "plan.yaml")
    recorded = {
        executor: await run_on(
            executor, manifest_for(data, MANIFEST, executor), plan, tmp_path / executor, monkeypatch
        )
        for executor in EXECUTORS
    }
    scripted = requests(recorded["self-hosted"])
    assert scripted[PUBLISH][0] == "publish_deliverable"
    assert {"researcher.reproduce.start", "researcher.diagnose.4", "implementer.fix.done"} <= scripted.keys()
    for executor in EXECUTORS[1:]:
        assert requests(recorded[executor]) == scripted, executor
        # The provider's own call id is kept beside each: the remote call it answers.
        remote = {
            e.payload.operation_id: e.payload.call_id
            for e in recorded[executor]
            if e.type == "remote" and e.payload.kind == "call"
        }
        assert provider_ids(recorded[executor]) == remote
        assert all(remote.values())
    assert set(provider_ids(recorded["self-hosted"]).values()) == {None}
    # The manifest's approval, bound to the operation id and the payload hash, covered the
    # publish everywhere: granted by the manifest, nobody asked.
    for executor, events in recorded.items():
        granted = [e.payload for e in events if isinstance(e, ApprovalEvent)]
        assert [(a.operation_id, a.by, a.granted) for a in granted] == [(PUBLISH, "manifest", True)], executor


async def test_a_plan_that_frames_steps_inside_its_steps_gets_the_same_ids_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(NESTED))
    plan = load_plan(plan_file)
    recorded = {}
    for executor in EXECUTORS:
        manifest = {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": "nested"},
            "spec": {
                "request": {"goal": "Write 42 and publish it."},
                "executor": {"type": "scripted", "plan": str(plan_file)}
                if executor == "self-hosted"
                else {"type": executor, "model": "any", "plan": str(plan_file)},
                "subagents": [{"name": "worker", "deliverable": "result.txt", "networkProfile": "none"}],
            },
        }
        recorded[executor] = requests(
            await run_on(executor, manifest, plan, tmp_path / executor, monkeypatch)
        )
    assert list(recorded["self-hosted"]) == [
        "worker.outer.start",
        "worker.inner.start",
        "worker.inner.1",
        "worker.inner.done",
        "worker.outer.1",
        "worker.outer.2",
        "worker.outer.done",
    ]
    assert recorded["openai-agents"] == recorded["anthropic-managed"] == recorded["self-hosted"]


def test_a_publish_one_byte_off_is_not_covered_and_waits_for_a_person(tmp_path: Path) -> None:
    """The manifest's approval names the payload the plan produces; a patch that differs by one
    byte is another payload: the managed run asks for an approval and waits on it."""
    plan = yaml.safe_load((EXAMPLE / "plan.yaml").read_text())
    changed = copy.deepcopy(plan)
    [action] = [
        a
        for step in changed["subagents"]["implementer"]["steps"]
        if step["id"] == "regression-test"
        for a in step["actions"]
        if a["tool"] == "write_file"
    ]
    action["arguments"]["content"] = action["arguments"]["content"].replace("Regression:", "regression:", 1)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(changed, sort_keys=False))
    data = manifest_for(yaml.safe_load(MANIFEST.read_text()), MANIFEST, "openai-agents")
    data["spec"]["executor"]["plan"] = str(plan_file)
    manifest = tmp_path / "session.yaml"
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))

    home = tmp_path / "home"
    standin = StandinProcess("openai-agents", plan_file, tmp_path / "standin")
    process = start_belay(home, "run", "--quiet", str(manifest), environment=standin.environment())
    try:
        # Asked for, and then nothing more for QUIET_S: a declared approval would have been
        # recorded within milliseconds of the request, and the publish run right after it.
        quiet = Quiet()
        wait_until(
            lambda: read_events(home, SESSION),
            f"the approval request {APPROVAL}, then a quiet record",
            until=lambda events: quiet.after(events, APPROVAL),
            timeout=180,
            interval=0.1,
            while_running=process,
        )
        brief = run_belay(home, "brief", SESSION)
    finally:
        kill_group(process)
        standin.stop()
    events = read_events(home, SESSION)
    [asked] = [e.payload for e in events if e.type == "approval_request"]
    assert asked.operation_id == PUBLISH
    assert asked.payload_sha256 != data["spec"]["approvals"][0]["payloadSha256"]
    assert not [e for e in events if isinstance(e, ApprovalEvent)]  # the manifest's does not cover it
    assert not any(e.type == "artifact" and e.payload.name == "fix.patch" for e in events)
    assert f"belay approve {SESSION} {APPROVAL}" in brief.stdout


class Quiet:
    """Whether a record asked for an approval and has not grown for QUIET_S since."""

    def __init__(self) -> None:
        self.length = -1
        self.since = time.monotonic()

    def after(self, events: list[Event], approval_id: str) -> bool:
        if len(events) != self.length:
            self.length, self.since = len(events), time.monotonic()
        asked = any(e.type == "approval_request" and e.payload.approval_id == approval_id for e in events)
        return asked and time.monotonic() - self.since >= QUIET_S
