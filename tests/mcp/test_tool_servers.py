"""A subagent's MCP tool server, through the real CLI: its tools listed in the sandbox and recorded,
classed from their annotations (the manifest stricter, or less strict only with `trust:
override`), gated by `approvalRequired` like a built-in tool, its answers redacted before they are
recorded, and a tool that vanished between two attempts failing visibly as its call's error, the
change recorded and shown."""

from __future__ import annotations

import json
import secrets
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from belay.api.agentsession import AgentSession, AgentSessionSpec
from belay.api.tool_servers import ToolClass
from belay.controller import admission
from belay.controller.settings import OperatorSettings
from belay.harness.mcp_tools import tool_class
from belay.journal.events import (
    ApprovalRequestEvent,
    EffectClass,
    Event,
    LifecycleEvent,
    LifecycleKind,
    ToolRequestEvent,
    ToolResultEvent,
)
from belay.local.runtime import LocalHome
from tests.belay_cli import completed, kill_group, read_events, run_belay, run_until, start_belay
from tests.mcp.session import FIND, LABEL, OPEN, SESSION, tracker_session
from tests.mcp.tracker_backend import running_tracker
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow


def listings(events: list[Event]) -> list[LifecycleEvent]:
    return [
        e for e in events if isinstance(e, LifecycleEvent) and e.payload.kind == LifecycleKind.TOOLS_LISTED
    ]


def effects(events: list[Event]) -> dict[str, EffectClass]:
    return {e.payload.tool: e.payload.effect for e in events if isinstance(e, ToolRequestEvent)}


def result_of(events: list[Event], operation_id: str) -> ToolResultEvent:
    return next(
        e for e in events if isinstance(e, ToolResultEvent) and e.payload.operation_id == operation_id
    )


def test_the_listing_is_recorded_and_each_tool_runs_under_its_annotations_class(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        ran = run_belay(home, "run", str(tracker_session(tmp_path / "session", tracker.url)))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        events = read_events(home, SESSION)
        assert completed(events)
        assert tracker.opened == 1
    [listed] = listings(events)
    assert listed.payload.subagent == "worker" and listed.payload.reason == "tracker"
    assert listed.payload.listing is not None
    document = json.loads(LocalHome(home).open_artifact_store().get(listed.payload.listing.sha256))
    assert document["identity"] == {"name": "belay-test-tracker", "version": "1.4.2"}
    tools = {tool["call_as"]: tool for tool in document["tools"]}
    assert set(tools) == {"tracker.find_issues", "tracker.open_issue", "tracker.label_issue"}
    assert tools["tracker.open_issue"]["input_schema"]["required"] == ["title"]
    assert tools["tracker.find_issues"]["annotations"] == {"readOnlyHint": True}
    assert effects(events) == {
        "update_plan": EffectClass.IDEMPOTENT,
        "tracker.find_issues": EffectClass.READ_ONLY,
        "tracker.open_issue": EffectClass.UNSAFE,
        "tracker.label_issue": EffectClass.IDEMPOTENT,
    }
    # What the server answered is the call's result, as data.
    assert result_of(events, OPEN).payload.output["structured_content"]["id"] == "ISSUE-1"
    assert "belay-test-tracker 1.4.2" in run_belay(home, "events", SESSION).stdout


def test_the_manifest_classes_a_tool_more_strictly_but_less_strictly_only_on_trust(tmp_path: Path) -> None:
    assert tool_class({"readOnlyHint": True}, None)[0] == EffectClass.READ_ONLY
    assert tool_class({"idempotentHint": True}, None)[0] == EffectClass.IDEMPOTENT
    assert tool_class({"destructiveHint": False}, None)[0] == EffectClass.UNSAFE
    assert tool_class({}, None)[0] == EffectClass.UNSAFE
    assert tool_class({"readOnlyHint": True}, ToolClass(effect="unsafe"))[0] == EffectClass.UNSAFE
    assert tool_class({}, ToolClass(effect="read_only"))[0] == EffectClass.UNSAFE
    assert tool_class({}, ToolClass(effect="read_only", trust="override"))[0] == EffectClass.READ_ONLY
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        classes = {
            "find_issues": {"effect": "read_only"},
            "open_issue": {"effect": "idempotent"},  # less strict, untrusted: stays unsafe
            "label_issue": {"effect": "read_only", "trust": "override"},
        }
        manifest = tracker_session(tmp_path / "session", tracker.url, tools=classes)
        ran = run_belay(home, "run", str(manifest))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        events = read_events(home, SESSION)
    assert effects(events)["tracker.open_issue"] == EffectClass.UNSAFE
    assert effects(events)["tracker.label_issue"] == EffectClass.READ_ONLY
    detail = listings(events)[0].payload.detail
    assert "tracker.open_issue (unsafe, kept unsafe: the manifest's idempotent is less strict" in detail
    assert (
        "tracker.label_issue (read_only, read_only by the manifest over its annotations (idempotent)"
        in detail
    )


def test_approval_required_names_a_server_tool_and_binds_its_payload(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        manifest = tracker_session(tmp_path / "session", tracker.url)
        spec = yaml.safe_load(manifest.read_text())
        spec["spec"]["approvalRequired"] = ["worker:tracker.open_issue"]
        manifest.write_text(yaml.safe_dump(spec))
        run = start_belay(home, "run", str(manifest))
        try:
            asked = wait_until(
                lambda: [e for e in read_events(home, SESSION) if isinstance(e, ApprovalRequestEvent)],
                "the open to wait for an approval",
                timeout=120,
                while_running=run,
            )
            assert tracker.opened == 0  # nothing sent before the person says yes
            request = next(
                e
                for e in read_events(home, SESSION)
                if isinstance(e, ToolRequestEvent) and e.payload.tool == "tracker.open_issue"
            )
            assert asked[0].payload.payload_sha256 == request.payload.payload_sha256
            approved = run_belay(home, "approve", SESSION, asked[0].payload.approval_id)
            assert approved.returncode == 0, approved.stderr
            assert run.wait(timeout=120) == 0
        finally:
            if run.poll() is None:
                kill_group(run)
        assert tracker.opened == 1
        assert completed(read_events(home, SESSION))


def test_a_tool_that_vanished_between_attempts_fails_visibly_and_the_change_is_shown(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        manifest = tracker_session(tmp_path / "session", tracker.url)
        reached, _ = run_until(home, ["run", str(manifest)], f"tool_result:{FIND}")
        assert reached
        tracker.offered.remove("label_issue")
        run_belay(home, "resume", SESSION)
        events = read_events(home, SESSION)
        assert tracker.opened == 1
    _, second = listings(events)
    assert "changed since its last listing: label_issue is gone" in second.payload.detail
    failed = result_of(events, LABEL).payload
    assert not failed.ok
    assert "tool server tracker does not offer 'label_issue'" in (failed.error or "")
    page = run_belay(home, "brief", SESSION).stdout
    assert "label_issue is gone" in page, page
    assert "does not offer 'label_issue'" in page, page


def session_with_server(server: dict[str, Any]) -> dict[str, Any]:
    """A manifest (as read from YAML) whose one subagent declares one tool server."""
    subagent = {"name": "worker", "toolServers": [{"name": "tracker", "command": ["x"], **server}]}
    spec = {"request": {"goal": "g"}, "executor": {"type": "scripted", "plan": "p"}, "subagents": [subagent]}
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "s"},
        "spec": spec,
    }


def test_a_manifest_with_an_unbuilt_transport_or_a_probe_that_writes_is_refused() -> None:
    session = session_with_server
    with pytest.raises(ValidationError, match="only 'stdio' is supported"):
        AgentSession.model_validate(session({"transport": "streamable-http"}))
    with pytest.raises(ValidationError, match="probe must be a read-only tool"):
        AgentSession.model_validate(session({"probe": "find", "tools": {"find": {"effect": "unsafe"}}}))
    with pytest.raises(ValidationError, match="keyed"):
        AgentSession.model_validate(session({"tools": {"open": {"effect": "keyed"}}}))
    wrong = session({})
    wrong["spec"]["approvalRequired"] = ["worker:other.open"]
    with pytest.raises(ValidationError, match=r"SERVER\.TOOL of a tool server the subagent declares"):
        AgentSession.model_validate(wrong)


def test_what_a_server_answers_passes_redaction_before_it_is_recorded(tmp_path: Path) -> None:
    leak = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    with running_tracker(tmp_path / "calls.log") as tracker:
        tracker.leak = leak
        home = tmp_path / "home"
        ran = run_belay(home, "run", str(tracker_session(tmp_path / "session", tracker.url)))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        events = read_events(home, SESSION)
    opened = result_of(events, OPEN).payload
    assert opened.ok and opened.redactions >= 1
    assert not [e.seq for e in events if leak in e.model_dump_json()]
    assert leak not in run_belay(home, "events", SESSION, "--json").stdout


def test_a_tool_server_runs_under_its_sandboxs_command_walls(tmp_path: Path) -> None:
    """The SDK's client starts the server, not the sandbox server: its walls still hold (here the
    disk figure, as the largest file it may write)."""
    with running_tracker(tmp_path / "calls.log") as tracker:
        tracker.offered.append("file_size_limit")
        home = tmp_path / "home"
        asked = [{"tool": "tracker.file_size_limit", "arguments": {}}]
        manifest = tracker_session(
            tmp_path / "session", tracker.url, actions=asked, resources={"diskMib": 64}
        )
        ran = run_belay(home, "run", str(manifest))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        events = read_events(home, SESSION)
    assert result_of(events, FIND).payload.output["structured_content"] == {"bytes": 64 * 1024 * 1024}


def test_a_plan_naming_a_server_the_subagent_does_not_declare_is_refused_before_it_runs(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    asked = [{"tool": "chat.post", "arguments": {"text": "hello"}}]
    manifest = tracker_session(tmp_path / "session", "http://127.0.0.1:1", actions=asked)
    refused = run_belay(home, "run", str(manifest))
    assert refused.returncode != 0
    [line] = refused.stderr.strip().splitlines()
    assert "chat.post: the subagent declares no tool server 'chat'" in line
    assert read_events(home, SESSION) == []


def test_a_server_that_cannot_be_listed_fails_each_call_visibly_and_sends_nothing(tmp_path: Path) -> None:
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        manifest = tracker_session(tmp_path / "session", tracker.url, command=["python", "tools/missing.py"])
        run_belay(home, "run", str(manifest))
        events = read_events(home, SESSION)
        assert tracker.opened == 0
    [listed] = listings(events)
    assert listed.payload.listing is None
    assert "tool server tracker could not be listed" in listed.payload.detail
    failed = result_of(events, OPEN).payload
    assert not failed.ok and "could not be listed" in (failed.error or "")


def test_an_operator_refuses_tool_servers_it_does_not_run_yet() -> None:
    settings = OperatorSettings(harness_image="registry.example/h:1", sandbox_image="registry.example/s:1")
    raw = session_with_server({})["spec"]
    [why] = admission.refusals(AgentSessionSpec.model_validate(raw), settings)
    assert why.startswith("spec.subagents[worker].toolServers: MCP tool servers run with `belay run` only")
    raw["subagents"][0]["toolServers"] = []
    assert admission.refusals(AgentSessionSpec.model_validate(raw), settings) == []


def test_what_a_server_writes_to_stderr_stays_in_its_sandbox(tmp_path: Path) -> None:
    """Its stderr would otherwise fill the sandbox server's log, a file of the home outside the
    sandbox's disk wall."""
    with running_tracker(tmp_path / "calls.log") as tracker:
        home = tmp_path / "home"
        ran = run_belay(home, "run", str(tracker_session(tmp_path / "session", tracker.url)))
        assert ran.returncode == 0, ran.stdout + ran.stderr
    logs = [
        path
        for path in home.rglob("*")
        if path.is_file() and b"tracker-server-stderr-marker" in path.read_bytes()
    ]
    assert logs == []
