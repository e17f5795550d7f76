"""The append's hand-encoded transaction is byte for byte what the protobuf library serializes for
the same `TxnRequest`, for every shape an append sends, and etcd's own parser reads it back."""

from __future__ import annotations

from aetcd import rpc
from hypothesis import given
from hypothesis import strategies as st

from belay.stores import etcd_wire as wire

keys = st.binary(min_size=1, max_size=300)
values = st.binary(max_size=40_000)  # empty, one-byte lengths, two- and three-byte varints
revisions = st.integers(min_value=0, max_value=2**63 - 1)


def library_txn(
    compares: list[tuple[bytes, int]], puts: list[tuple[bytes, bytes]], ranges: list[bytes]
) -> bytes:
    request = rpc.TxnRequest(
        compare=[
            rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=revision)
            for key, revision in compares
        ],
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
    encoded = wire.txn(
        [wire.mod_revision_is(key, revision) for key, revision in compares],
        [wire.put(key, value) for key, value in puts],
        wire.failure_ranges(tuple(ranges)),
    )
    assert encoded == library_txn(compares, puts, ranges)
    parsed = rpc.TxnRequest.FromString(encoded)
    assert [(c.key, c.mod_revision, c.target) for c in parsed.compare] == [
        (key, revision, rpc.Compare.MOD) for key, revision in compares
    ]
    assert [(op.request_put.key, op.request_put.value) for op in parsed.success] == puts
    assert [op.request_range.key for op in parsed.failure] == ranges


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trips_through_the_library(number: int) -> None:
    encoded = wire.mod_revision_is(b"k", number % 2**63)
    assert rpc.TxnRequest.FromString(encoded).compare[0].mod_revision == number % 2**63
