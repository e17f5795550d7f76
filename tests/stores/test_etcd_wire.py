"""The append's hand-encoded transaction is byte for byte what the protobuf library serializes for
the same `TxnRequest`, for every shape an append sends, and etcd's own parser reads it back."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from aetcd import rpc
from hypothesis import given
from hypothesis import strategies as st

from belay.journal.events import EventDraft, Note, NoteKind, UserInput
from belay.stores.etcd import EtcdEventStore, SessionKeys, Snapshot, wire
from belay.stores.etcd.appends import append_request
from belay.stores.integrity import Chain

keys = st.binary(min_size=1, max_size=300)
values = st.binary(max_size=40_000)  # empty, one-byte lengths, two- and three-byte varints
revisions = st.integers(min_value=0, max_value=2**63 - 1)


def library_compare(key: bytes, expected: int | bytes) -> rpc.Compare:
    """A mod_revision compare for a number, a value compare for bytes."""
    if isinstance(expected, bytes):
        return rpc.Compare(key=key, target=rpc.Compare.VALUE, result=rpc.Compare.EQUAL, value=expected)
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=expected)


def library_txn(
    compares: Sequence[tuple[bytes, int | bytes]], puts: list[tuple[bytes, bytes]], ranges: list[bytes]
) -> bytes:
    request = rpc.TxnRequest(
        compare=[library_compare(key, expected) for key, expected in compares],
        success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value)) for key, value in puts],
        failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key)) for key in ranges],
    )
    return request.SerializeToString(deterministic=True)


@given(
    compares=st.lists(st.tuples(keys, revisions), min_size=1, max_size=3),
    puts=st.lists(st.tuples(keys, values), min_size=1, max_size=6),
    ranges=st.lists(keys, min_size=1, max_size=3),
)
def test_encoded_txn_is_the_library_serialization(
    compares: list[tuple[bytes, int]], puts: list[tuple[bytes, bytes]], ranges: list[bytes]
) -> None:
    # A repeated field is the concatenation of its entries, so a request is its parts joined.
    encoded = b"".join(
        [
            *(wire.mod_revision_is(key, revision) for key, revision in compares),
            *(wire.put(key, value) for key, value in puts),
            wire.failure_ranges(tuple(ranges)),
        ]
    )
    assert encoded == library_txn(compares, puts, ranges)
    parsed = rpc.TxnRequest.FromString(encoded)
    assert [(c.key, c.mod_revision, c.target) for c in parsed.compare] == [
        (key, revision, rpc.Compare.MOD) for key, revision in compares
    ]
    assert [(op.request_put.key, op.request_put.value) for op in parsed.success] == puts
    assert [op.request_range.key for op in parsed.failure] == ranges


@given(key=keys, value=st.binary(min_size=1, max_size=40_000))
def test_a_value_compare_is_the_library_serialization(key: bytes, value: bytes) -> None:
    encoded = wire.value_is(key, value)
    assert encoded == library_txn([(key, value)], [], [])
    [compare] = rpc.TxnRequest.FromString(encoded).compare
    assert (compare.key, compare.value, compare.target) == (key, value, rpc.Compare.VALUE)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trips_through_the_library(number: int) -> None:
    encoded = wire.mod_revision_is(b"k", number % 2**63)
    assert rpc.TxnRequest.FromString(encoded).compare[0].mod_revision == number % 2**63


@given(st.integers(min_value=0, max_value=2**20))
def test_a_kept_varint_is_the_one_encoded_afresh(number: int) -> None:
    first, again = wire.VARINT[number], wire.VARINT[number]  # the second read is the kept one
    assert first == again == wire.varint(number)


@pytest.mark.parametrize("unless_newer", [None, ("executor_change", 0), ("executor_change", 5)])
@pytest.mark.parametrize("claim", [None, "approval/x"])
@pytest.mark.parametrize("fenced", [False, True])
@pytest.mark.parametrize("idempotency_key", [None, "k/1"])
@pytest.mark.parametrize("new_session", [False, True])
def test_the_append_transaction_checks_and_writes_every_key_of_the_layout(
    fenced: bool,
    idempotency_key: str | None,
    new_session: bool,
    claim: str | None,
    unless_newer: tuple[str, int] | None,
) -> None:
    store = EtcdEventStore(["http://127.0.0.1:1"], prefix="/p", record_key=b"")
    keys = SessionKeys.of("/p", "s")
    snapshot = Snapshot(head_mod_revision=0 if new_session else 40, last_seq=6, lease_mod_revision=9)
    drafts = [
        EventDraft(payload=Note(note_id="a", kind=NoteKind.FINDING, text="")),
        EventDraft(payload=UserInput(goal="g")),
        EventDraft(payload=Note(note_id="b", kind=NoteKind.FINDING, text="")),
    ]
    values = [b"seven", b"eight", b"nine"]
    link = b"c" * 64
    encoded = append_request(
        keys,
        snapshot,
        drafts,
        7,
        values,
        link,
        idempotency_key,
        "d",
        fenced,
        claim,
        store.chain,
        store.prefix,
        unless_newer,
    )

    idem = [keys.idem(idempotency_key)] if idempotency_key else []
    claimed = [keys.claim(claim)] if claim else []
    guarded = [keys.latest(unless_newer[0])] if unless_newer else []
    compares: list[tuple[bytes, int | bytes]] = [(keys.head, snapshot.head_mod_revision)]
    compares += [(keys.lease, 9)] if fenced else []
    compares += [(key, 0) for key in idem + claimed]
    if unless_newer is not None:
        # The latest entry still names the seq seen, or there is none when none was seen.
        seen = unless_newer[1]
        compares += [(guarded[0], b'{"seq":%d}' % seen if seen else 0)]
    puts = [(keys.event(7), b"seven"), (keys.event(8), b"eight"), (keys.event(9), b"nine")]
    head = b'{"last_seq":9,"chain":"%s","seal":"%s"}' % (link, Chain(None).seal(9, link))
    puts += [(keys.head, head), (keys.latest("note"), b'{"seq":9}')]
    puts += [(keys.latest("user_input"), b'{"seq":8}')]
    puts += [(key, b'{"digest":"d","first_seq":7,"last_seq":9}') for key in idem]
    puts += [(key, b'{"seq":7}') for key in claimed]
    puts += [(b"/p/index/s", b"")] if new_session else []
    assert encoded == library_txn(compares, puts, [keys.head, keys.lease, *idem, *claimed, *guarded])
