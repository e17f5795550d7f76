"""Claims: one batch per claim and session, decided inside the store's transaction, against
concurrent deciders in one process and in several."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from belay.journal.events import Event, EventDraft, Note, NoteKind
from belay.stores.base import ClaimTaken, EventStore, StaleLease
from tests.conformance.backends import EventBackend

CLAIMER_SCRIPT = Path(__file__).with_name("claimer_process.py")
# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 60


def decision(text: str) -> list[EventDraft]:
    return [EventDraft(payload=Note(note_id=text, kind=NoteKind.DECISION, text=text))]


def texts(events: list[Event]) -> list[str]:
    return [e.payload.text for e in events if isinstance(e.payload, Note)]


async def test_a_claim_is_taken_once_and_the_refusal_names_the_batch_that_took_it(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, decision("before"))
    [granted] = await event_store.append(session, decision("grant"), claim="approval/a")
    with pytest.raises(ClaimTaken) as refused:
        await event_backend.open_another().append(session, decision("reject"), claim="approval/a")
    assert (refused.value.seq, refused.value.claim, refused.value.session_id) == (
        granted.seq,
        "approval/a",
        session,
    )
    # Another claim, no claim, and the same claim in another session are all free.
    await event_store.append(session, decision("other"), claim="approval/b")
    await event_store.append(session, decision("unclaimed"))
    await event_store.append(event_backend.session("elsewhere"), decision("there"), claim="approval/a")
    assert texts(await event_store.read(session)) == ["before", "grant", "other", "unclaimed"]


async def test_a_replay_of_the_claiming_batch_is_answered_and_a_new_key_is_refused(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    original = await event_store.append(session, decision("grant"), idempotency_key="k1", claim="approval/a")
    replayed = await event_backend.open_another().append(
        session, decision("grant"), idempotency_key="k1", claim="approval/a"
    )
    assert replayed == original
    with pytest.raises(ClaimTaken):
        await event_store.append(session, decision("grant"), idempotency_key="k2", claim="approval/a")
    assert await event_store.last_seq(session) == 1


async def test_a_refused_claim_writes_nothing_of_its_batch_and_a_stale_lease_comes_first(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    lease = await event_store.acquire_lease(session, "attempt-1")
    await event_store.append(session, decision("grant"), claim="approval/a", lease=lease.number)
    batch = [*decision("reject"), *decision("reason")]
    with pytest.raises(ClaimTaken):
        await event_store.append(session, batch, claim="approval/a", lease=lease.number)
    await event_store.acquire_lease(session, "attempt-2")
    with pytest.raises(StaleLease):
        await event_store.append(session, batch, claim="approval/a", lease=lease.number)
    assert texts(await event_store.read(session)) == ["grant"]


async def test_a_deleted_session_frees_its_claims(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    session = event_backend.session()
    await event_store.append(session, decision("first life"), claim="approval/a")
    await event_store.delete_session(session)
    [again] = await event_store.append(session, decision("second life"), claim="approval/a")
    assert again.seq == 1


async def test_concurrent_deciders_in_one_process_record_one_decision_per_claim(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Every claim raced by four deciders on independent handles (an approve and a reject each
    from two places): exactly one wins, the others are told the winner's seq."""
    session = event_backend.session()
    handles = [event_store, *(event_backend.open_another() for _ in range(3))]
    claims = 25

    async def decider(number: int) -> dict[int, int | None]:
        outcomes: dict[int, int | None] = {}
        for index in range(claims):
            try:
                [event] = await handles[number].append(
                    session, decision(f"{number}:{index}"), claim=f"approval/{index}"
                )
            except ClaimTaken as taken:
                outcomes[index] = -taken.seq
            else:
                outcomes[index] = event.seq
        return outcomes

    results = await asyncio.wait_for(asyncio.gather(*(decider(n) for n in range(4))), HANG_GUARD_SECONDS)
    stored = await event_store.read(session)
    assert [e.seq for e in stored] == list(range(1, claims + 1))
    by_seq = {e.seq: e for e in stored}
    for index in range(claims):
        won = [(n, r[index]) for n, r in enumerate(results) if (r[index] or 0) > 0]
        assert len(won) == 1, f"claim {index}: {won}"
        winner, seq = won[0]
        assert texts([by_seq[seq]]) == [f"{winner}:{index}"]
        assert all(r[index] == -seq for n, r in enumerate(results) if n != winner)


async def test_concurrent_decider_processes_record_one_decision_per_claim(
    event_backend: EventBackend, event_store: EventStore
) -> None:
    """Two processes, one approving and one rejecting, race through the same 100 claims."""
    session = event_backend.session()
    claims = 100
    outputs = await asyncio.to_thread(
        run_claimers, event_backend.spec, session, ["approve", "reject"], claims
    )
    stored = await event_store.read(session)
    assert [e.seq for e in stored] == list(range(1, claims + 1))
    by_claim = {int(e.payload.note_id.split(":")[1]): e for e in stored if isinstance(e.payload, Note)}
    assert sorted(by_claim) == list(range(claims))
    for index, event in by_claim.items():
        assert isinstance(event.payload, Note)
        winner = event.payload.text
        loser = "reject" if winner == "approve" else "approve"
        assert outputs[winner][index] == ("won", event.seq)
        assert outputs[loser][index] == ("lost", event.seq)


def run_claimers(
    spec: dict[str, object], session: str, labels: list[str], claims: int
) -> dict[str, dict[int, tuple[str, int]]]:
    children = {
        label: subprocess.Popen(
            [sys.executable, str(CLAIMER_SCRIPT), json.dumps(spec), session, label, str(claims)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for label in labels
    }
    for child in children.values():
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outputs: dict[str, dict[int, tuple[str, int]]] = {}
    for label, child in children.items():
        out, _ = child.communicate(timeout=HANG_GUARD_SECONDS * 2)
        assert child.returncode == 0
        outputs[label] = {
            int(i): (word, int(seq)) for word, i, seq in (line.split() for line in out.splitlines())
        }
    return outputs
