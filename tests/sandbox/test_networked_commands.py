"""A command in a sandbox that reaches a network may change something outside it (a push, a post, a
deploy): the harness records it `unsafe`, so a recovery never runs it again blindly, unless the
manifest classes the subagent's commands otherwise. In a sandbox that reaches nothing a command's
effects stay in the workspace, which a recovery restores: it stays idempotent."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import EffectClass, ToolRequestEvent
from belay.journal.tools import effect_of
from tests.belay_cli import read_events, run_belay
from tests.scripted import write_scripted_session


def test_the_effect_class_of_a_command_follows_what_its_sandbox_reaches() -> None:
    assert effect_of("run_command", "none") == EffectClass.IDEMPOTENT
    assert effect_of("run_command", "allowlist") == EffectClass.UNSAFE
    assert effect_of("run_command", "internet") == EffectClass.UNSAFE
    assert effect_of("run_command", "internet", "idempotent") == EffectClass.IDEMPOTENT
    assert effect_of("run_command", "none", "unsafe") == EffectClass.UNSAFE
    # Other tools keep their catalogue's class wherever they run.
    assert effect_of("write_file", "internet") == EffectClass.IDEMPOTENT
    assert effect_of("read_file", "internet") == EffectClass.READ_ONLY


def test_belay_run_records_a_networked_command_as_unsafe(tmp_path: Path) -> None:
    step = [
        {
            "id": "probe",
            "title": "probe",
            "actions": [{"tool": "run_command", "arguments": {"command": "true"}}],
        }
    ]
    manifest = write_scripted_session(
        tmp_path / "session",
        "networked",
        "run one command in each sandbox",
        [
            {"name": "offline", "networkProfile": "none"},
            {"name": "fetcher", "networkProfile": "allowlist", "allowlist": []},
            {
                "name": "builder",
                "networkProfile": "allowlist",
                "allowlist": [],
                "commandEffect": "idempotent",
            },
        ],
        {"offline": step, "fetcher": step, "builder": step},
    )
    home = tmp_path / "home"
    ran = run_belay(home, "run", str(manifest))
    assert ran.returncode == 0, ran.stderr
    effects = {
        event.payload.subagent: event.payload.effect
        for event in read_events(home, "networked")
        if isinstance(event, ToolRequestEvent) and event.payload.tool == "run_command"
    }
    assert effects == {
        "offline": EffectClass.IDEMPOTENT,
        "fetcher": EffectClass.UNSAFE,
        "builder": EffectClass.IDEMPOTENT,
    }
