from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from belay.journal.context import (
    EVIDENCE_LIMIT,
    build_context,
    estimate_tokens,
    render_event,
    select_evidence,
)
from belay.journal.events import (
    EffectClass,
    Event,
    EventDraft,
    ModelOutput,
    Summary,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
)
from belay.journal.state import fold
from belay.stores.sqlite import SqliteEventStore
from tests.journal.fixtures import SESSION, LogBuilder, realistic_log


class CountingStore:
    """The real SQLite store, counting how many events each read returns."""

    def __init__(self, inner: SqliteEventStore) -> None:
        self.inner = inner
        self.events_read = 0

    async def tail(self, session_id: str, count: int) -> list[Event]:
        found = await self.inner.tail(session_id, count)
        self.events_read += len(found)
        return found

    async def latest(self, session_id: str, event_type: str) -> Event | None:
        found = await self.inner.latest(session_id, event_type)
        self.events_read += found is not None
        return found

    async def read(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        found = await self.inner.read(session_id, from_seq, to_seq, limit)
        self.events_read += len(found)
        return found

    def watch(self, session_id: str, from_seq: int = 1) -> AsyncIterator[Event]:
        return self.inner.watch(session_id, from_seq)


async def _store_with(tmp_path: Path, drafts: Sequence[EventDraft]) -> SqliteEventStore:
    store = SqliteEventStore(tmp_path / "events.db", synchronous="NORMAL")
    for start in range(0, len(drafts), 1000):
        await store.append(SESSION, drafts[start : start + 1000])
    return store


def _drafts(events: Sequence[Event]) -> list[EventDraft]:
    return [EventDraft(payload=e.payload, parent_seq=e.parent_seq, actor=e.actor) for e in events]


async def test_context_of_the_realistic_session(tmp_path: Path) -> None:
    store = await _store_with(tmp_path, _drafts(realistic_log()))
    try:
        stored = await store.read(SESSION)
        state = fold(stored)
        context = await build_context(store, SESSION, state, budget_tokens=4000)
    finally:
        await store.close()
    assert context.goal == "Fix the CSV parser's quoted-newline bug and prepare a release"
    assert context.request_parts["target"] == "Python 3.12"
    assert context.checkpoint is not None and context.checkpoint.startswith("cp-1 (verified")
    evidence = {(e.kind, e.id) for e in context.evidence}
    assert {("approval", "apr-publish"), ("unknown_outcome", "op-push-1"), ("decision", "d-rfc")} <= evidence
    assert {("result", "repro"), ("result", "patch")} <= evidence
    assert ("result", "compat-matrix") not in evidence  # invalidated by the scope change
    # Everything fits: the whole short log is in the recent section, newest last.
    assert context.recent_from_seq == 1
    assert context.recent[-1] == render_event(stored[-1])
    assert context.tokens <= context.budget_tokens
    assert context.tokens == estimate_tokens(context.to_text())


@pytest.mark.parametrize("budget", [200, 300, 500])
async def test_a_small_budget_keeps_the_newest_events_and_stays_within_it(
    tmp_path: Path, budget: int
) -> None:
    store = await _store_with(tmp_path, _drafts(realistic_log()))
    try:
        stored = await store.read(SESSION)
        context = await build_context(store, SESSION, fold(stored), budget_tokens=budget)
    finally:
        await store.close()
    assert context.tokens <= budget
    assert 0 < len(context.recent) < len(stored)
    # The recent section is the contiguous newest part of the log.
    assert context.recent == [render_event(e) for e in stored[-len(context.recent) :]]


async def test_the_latest_summary_is_included(tmp_path: Path) -> None:
    drafts = _drafts(realistic_log())
    drafts.append(EventDraft(payload=Summary(covers_from_seq=1, covers_to_seq=10, text="older summary")))
    drafts.append(EventDraft(payload=Summary(covers_from_seq=1, covers_to_seq=30, text="newer summary")))
    store = await _store_with(tmp_path, drafts)
    try:
        context = await build_context(store, SESSION, fold(await store.read(SESSION)), budget_tokens=2000)
    finally:
        await store.close()
    assert context.summary is not None
    assert context.summary.startswith("seq 1-30 (summary at seq ")
    assert context.summary.endswith(": newer summary")


@pytest.mark.parametrize("padding", [200, 3000])
async def test_reads_are_bounded_whatever_the_history_length(tmp_path: Path, padding: int) -> None:
    drafts = _drafts(realistic_log())
    drafts += [EventDraft(payload=ModelOutput(text=f"thinking {i}")) for i in range(padding)]
    store = await _store_with(tmp_path, drafts)
    try:
        state = fold(await store.read(SESSION))
        counting = CountingStore(store)
        context = await build_context(counting, SESSION, state, budget_tokens=100_000, tail_limit=50)  # type: ignore[arg-type]
    finally:
        await store.close()
    assert len(context.recent) == 50
    assert counting.events_read <= 50 + EVIDENCE_LIMIT + 1


def test_evidence_prefers_results_of_the_step_in_progress_then_the_newest() -> None:
    log = LogBuilder()
    log.add(UserInput(goal="g"))
    for i in range(13):
        step = "survey" if i < 3 else "patch"
        log.add(ToolRequest(operation_id=f"op-{i}", tool="t", effect=EffectClass.READ_ONLY, step=step))
        log.add(ToolResult(operation_id=f"op-{i}", ok=True, result_id=f"r{i}"))
    log.add(Task(task_id="survey", status=TaskStatus.RUNNING))  # back to the survey step
    state = fold(log.events)
    _, wanted = select_evidence(state)
    assert [result_id for result_id, _ in wanted] == ["r2", "r1", "r0", "r12", "r11", "r10", "r9", "r8"]
    assert len(wanted) == EVIDENCE_LIMIT
