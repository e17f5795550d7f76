"""The append's etcd transaction, encoded straight to protobuf wire bytes.

An append is one `TxnRequest` of a fixed shape: mod-revision compares (and a value compare for an
append decided on the latest event of a type), puts on success, ranges on failure. Building it as
nested protobuf messages (one object per compare, per operation and per put, each copied into its
parent) was among the largest parts of the store's own work around the RPC, and that work runs
cold, right after the event loop wakes from the previous call. Encoding the few fields this shape
uses is a handful of byte concatenations. The bytes are the ones the protobuf library serializes
for the same message (fields in number order, unset fields omitted); tests/stores/test_etcd_wire.py
checks that against the library for every shape an append sends.

Field numbers, from etcd's rpc.proto:
    TxnRequest   compare = 1, success = 2, failure = 3
    Compare      result = 1 (EQUAL = 0), target = 2 (MOD = 2, VALUE = 3), key = 3, mod_revision = 6,
                 value = 7
    RequestOp    request_range = 1, request_put = 2
    PutRequest   key = 1, value = 2
    RangeRequest key = 1
"""

from __future__ import annotations

import functools

TXN_COMPARE = b"\x0a"  # field 1, length-delimited
TXN_SUCCESS = b"\x12"  # field 2, length-delimited
TXN_FAILURE = b"\x1a"  # field 3, length-delimited
COMPARE_TARGET_MOD = b"\x10\x02"  # field 2 (target), varint 2 (MOD)
COMPARE_KEY = b"\x1a"  # field 3, length-delimited
COMPARE_MOD_REVISION = b"\x30"  # field 6, varint
COMPARE_TARGET_VALUE = b"\x10\x03"  # field 2 (target), varint 3 (VALUE)
COMPARE_VALUE = b"\x3a"  # field 7, length-delimited
OP_RANGE = b"\x0a"  # RequestOp field 1, length-delimited
OP_PUT = b"\x12"  # RequestOp field 2, length-delimited
KEY = b"\x0a"  # PutRequest/RangeRequest field 1, length-delimited
VALUE = b"\x12"  # PutRequest field 2, length-delimited


def varint(number: int) -> bytes:
    if number < 0:
        raise ValueError(f"a varint here is never negative: {number}")
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


class _Varints(dict[int, bytes]):
    """Encoded varints by value. A hit is a plain dict lookup, with no Python call: this work
    runs right after the event loop wakes, where every call is slow. Lengths and small numbers
    below 2**14 (two bytes) are kept; larger ones are encoded each time."""

    def __missing__(self, number: int) -> bytes:
        encoded = varint(number)
        if number < 1 << 14:
            self[number] = encoded
        return encoded


VARINT = _Varints()


def delimited(tag: bytes, data: bytes) -> bytes:
    return tag + VARINT[len(data)] + data


def mod_revision_is(key: bytes, revision: int) -> bytes:
    """A `Compare`: the key's mod_revision equals `revision` (0: the key does not exist)."""
    # mod_revision is a member of the `target_union` oneof, so it is sent even when it is 0.
    body = COMPARE_TARGET_MOD + COMPARE_KEY + VARINT[len(key)] + key + COMPARE_MOD_REVISION + VARINT[revision]
    return TXN_COMPARE + VARINT[len(body)] + body


def value_is(key: bytes, value: bytes) -> bytes:
    """A `Compare`: the key exists and its value equals `value` (etcd fails a value compare on a
    key that does not exist)."""
    body = (
        COMPARE_TARGET_VALUE
        + COMPARE_KEY
        + VARINT[len(key)]
        + key
        + COMPARE_VALUE
        + VARINT[len(value)]
        + value
    )
    return TXN_COMPARE + VARINT[len(body)] + body


def put(key: bytes, value: bytes) -> bytes:
    """A success-branch `RequestOp` holding a `PutRequest`."""
    request = KEY + VARINT[len(key)] + key
    if value:
        request += VALUE + VARINT[len(value)] + value
    operation = OP_PUT + VARINT[len(request)] + request
    return TXN_SUCCESS + VARINT[len(operation)] + operation


@functools.lru_cache(maxsize=4096)
def failure_ranges(keys: tuple[bytes, ...]) -> bytes:
    """Failure-branch `RequestOp`s, each a `RangeRequest` of one key. The same few per session,
    so they are encoded once."""
    return b"".join(delimited(TXN_FAILURE, delimited(OP_RANGE, delimited(KEY, key))) for key in keys)
