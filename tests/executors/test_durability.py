"""What an attempt waits for the disk for: before anything leaves the harness that the record must
explain, and nothing else (`EventStore.append(durable=...)`). A tool that may not simply run again
(unsafe, keyed) is on disk as requested before it runs; every result is on disk before it is
handed to the provider; the start and the end are on disk. A request of a tool that runs again
anyway, a delivery's note and a task marked running may wait for the next durable append. On
each executor, a session of every kind of call is recorded with exactly that."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from belay.api.agentsession import load_manifest
from belay.harness.models.scripted import ScriptedPlan
from belay.journal.events import (
    EffectClass,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    Remote,
    RemoteKind,
    ToolRequest,
    ToolResult,
)
from belay.local.runtime import LocalHome, run_local
from belay.stores.sqlite import SqliteEventStore
from tests.executors.example import STANDINS, one_subagent_session, standin_for
from tests.scripted import write_scripted_session

PLAN: dict[str, Any] = {
    "steps": [
        {
            "id": "work",
            "title": "Write, read, count and file a ticket",
            "actions": [
                {"tool": "write_file", "arguments": {"path": "notes.txt", "content": "a\nb\n"}},
                {"tool": "read_file", "arguments": {"path": "notes.txt"}},
                {"tool": "run_command", "arguments": {"command": "wc -l notes.txt"}},
                {"tool": "create_ticket", "arguments": {"title": "notes", "body": "two lines"}},
                {"tool": "read_file", "arguments": {"path": "notes.txt"}},
            ],
        }
    ]
}
STARTS_AND_ENDS = {
    LifecycleKind.HARNESS_STARTED,
    LifecycleKind.SESSION_COMPLETED,
    LifecycleKind.SESSION_FAILED,
    LifecycleKind.HARNESS_FINISHED,
}
Append = tuple[list[Any], bool]


def watch_appends(monkeypatch: pytest.MonkeyPatch) -> list[Append]:
    """Every append's payloads and durability, in order, as the SQLite store receives them."""
    appends: list[Append] = []
    original = SqliteEventStore.append

    async def append(
        self: SqliteEventStore, session_id: str, drafts: Sequence[EventDraft], **options: Any
    ) -> Any:
        appends.append(([d.payload for d in drafts], options.get("durable", True)))
        return await original(self, session_id, drafts, **options)

    monkeypatch.setattr(SqliteEventStore, "append", append)
    return appends


def check_durability(appends: list[Append]) -> None:
    relaxed_requests = 0
    for payloads, durable in appends:
        requests = [p for p in payloads if isinstance(p, ToolRequest)]
        if any(isinstance(p, ToolResult) for p in payloads):
            assert durable, f"a result was not on disk before it went out: {payloads}"
        if any(r.effect in (EffectClass.UNSAFE, EffectClass.KEYED) for r in requests):
            assert durable, f"an unsafe request was not on disk before it ran: {payloads}"
        elif requests:
            assert not durable, f"a request of a tool that runs again waited for the disk: {payloads}"
            relaxed_requests += 1
        if any(isinstance(p, Lifecycle) and p.kind in STARTS_AND_ENDS for p in payloads):
            assert durable, f"a start or an end was not on disk: {payloads}"
        delivered = [p for p in payloads if isinstance(p, Remote) and p.kind == RemoteKind.RESULT_DELIVERED]
        if delivered and len(delivered) == len(payloads):
            assert not durable, f"a delivery's note alone waited for the disk: {payloads}"
    assert relaxed_requests >= 3  # write, read, count (and the second read)
    ended = [p for payloads, _ in appends for p in payloads if isinstance(p, Lifecycle)]
    assert LifecycleKind.SESSION_COMPLETED in [p.kind for p in ended]


@pytest.mark.parametrize("executor", sorted(STANDINS))
async def test_a_managed_attempt_waits_for_the_disk_only_before_what_leaves_it(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    appends = watch_appends(monkeypatch)
    plan = ScriptedPlan.model_validate({"subagents": {"worker": PLAN}})
    async with standin_for(executor, plan, monkeypatch):
        session = one_subagent_session("durability", executor, "Write, read, count, file.")
        result = await run_local(LocalHome(tmp_path), session)
    assert result.completed, result.detail
    check_durability(appends)


async def test_a_self_hosted_attempt_waits_for_the_disk_only_before_what_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    appends = watch_appends(monkeypatch)
    manifest = write_scripted_session(
        tmp_path / "session",
        "durability",
        "Write, read, count, file.",
        [{"name": "worker", "networkProfile": "none"}],
        {"worker": PLAN["steps"]},
    )
    result = await run_local(LocalHome(tmp_path / "home"), load_manifest(manifest))
    assert result.completed, result.detail
    check_durability(appends)
