"""AgentSession specs and refs shared by the controller tests."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from belay.api.agentsession import AgentSessionSpec
from belay.controller.desired import SessionRef
from belay.journal.events import EventDraft, Note, NoteKind, UserInput
from belay.stores.factory import open_event_store
from tests.api.kubehelpers import REPO_ROOT

EXAMPLE_MANIFEST: dict[str, Any] = yaml.safe_load(
    (REPO_ROOT / "examples/parser-fix/session.yaml").read_text()
)
REF = SessionRef(
    name="parser-fix", namespace="team-a", uid="0b7c6a52-0000-4000-8000-000000000001", generation=3
)


def spec_with(**changes: Any) -> AgentSessionSpec:
    raw = dict(EXAMPLE_MANIFEST["spec"])
    if "subagents" in changes:
        # The example's approval rule names one of its own subagents; other subagents drop it.
        raw["approvalRequired"] = []
    raw.update(changes)
    return AgentSessionSpec.model_validate(raw)


def subagent(name: str, profile: str = "none", allowlist: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "networkProfile": profile, "allowlist": allowlist or []}


def pending_session(name: str, namespace: str, goal: str) -> dict[str, Any]:
    """A session with one subagent whose plan no harness ever reads: where no node runs its pods,
    it stays Pending, with its seven children and its request in the record."""
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "request": {"goal": goal},
            "executor": {"type": "scripted", "plan": "/nonexistent/plan.yaml"},
            "subagents": [{"name": "worker"}],
        },
    }


def record_with_a_gap(path: Path, name: str) -> str:
    """A SQLite record of session `name` at `path`, its request and three findings, whose seq 3 is
    then deleted behind the store's back (a record no store would write): its events URL."""

    async def write() -> None:
        store = open_event_store({"backend": "sqlite", "path": str(path)})
        try:
            await store.append(name, [EventDraft(payload=UserInput(goal="g"))])
            notes = [
                EventDraft(payload=Note(note_id=f"n{i}", kind=NoteKind.FINDING, text="")) for i in range(3)
            ]
            await store.append(name, notes)
        finally:
            await store.close()

    asyncio.run(write())
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("DELETE FROM events WHERE session_id = ? AND seq = 3", (name,))
    connection.close()
    return f"sqlite://{path}"
