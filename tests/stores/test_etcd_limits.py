"""Checks of the etcd backend that need no server: endpoint parsing, key layout and batch limits."""

from __future__ import annotations

import pytest

from belay.journal.envelope import EnvelopeJson
from belay.journal.events import EventDraft, Note, NoteKind, UserInput, now_utc
from belay.stores.base import MAX_PAYLOAD_BYTES, PayloadTooLarge
from belay.stores.etcd import (
    MAX_BATCH_EVENTS,
    EtcdEventStore,
    SessionKeys,
    check_batch_size,
    grpc_target,
    open_etcd_event_store,
    prefix_range_end,
)


def test_endpoints_become_one_grpc_target_listing_every_member() -> None:
    target = grpc_target(["http://127.0.0.1:2379", "127.0.0.1:22379"])
    assert target == "ipv4:127.0.0.1:2379,127.0.0.1:22379"


def test_one_dns_name_stays_a_dns_target_so_every_member_behind_it_is_used() -> None:
    assert grpc_target(["http://etcd.belay-system.svc:2379"]) == "dns:///etcd.belay-system.svc:2379"


def test_several_names_are_resolved_into_one_address_list() -> None:
    assert grpc_target(["http://localhost:2379", "127.0.0.2:2380"]) == "ipv4:127.0.0.1:2379,127.0.0.2:2380"
    assert grpc_target(["http://[::1]:2379", "http://[::1]:2380"]) == "ipv6:[::1]:2379,[::1]:2380"


def test_an_endpoint_without_a_port_is_refused() -> None:
    with pytest.raises(ValueError, match="port"):
        grpc_target(["http://127.0.0.1"])
    with pytest.raises(ValueError, match="port"):
        EtcdEventStore(["http://127.0.0.1:2379", "etcd-1"])


def test_range_end_covers_exactly_the_prefix() -> None:
    assert prefix_range_end(b"/belay/a/") == b"/belay/a0"
    assert prefix_range_end(b"a\xff") == b"b"
    assert b"/belay/a/zzz" < prefix_range_end(b"/belay/a/") <= b"/belay/a0"


def test_session_ids_are_one_key_segment_and_seqs_sort_as_numbers() -> None:
    keys = SessionKeys.of("/belay", "team/a b")
    assert keys.head == b"/belay/sessions/team%2Fa%20b/head"
    assert keys.event(9) < keys.event(10) < keys.event(100)
    assert keys.event(7).startswith(keys.events_prefix)
    assert keys.idem("k/1") == b"/belay/sessions/team%2Fa%20b/idem/k%2F1"
    assert keys.latest("note") == b"/belay/sessions/team%2Fa%20b/latest/note"


def stored_bytes(drafts: list[EventDraft]) -> list[bytes]:
    envelope = EnvelopeJson("s", now_utc(), None)
    return [envelope.around(draft, seq).encode() for seq, draft in enumerate(drafts, start=1)]


def check(drafts: list[EventDraft]) -> None:
    check_batch_size(drafts, stored_bytes(drafts))


def test_an_oversized_payload_is_refused_with_a_pointer_to_artifacts() -> None:
    big = EventDraft(payload=UserInput(goal="x" * (MAX_PAYLOAD_BYTES + 1)))
    with pytest.raises(PayloadTooLarge, match="artifact"):
        check([EventDraft(payload=UserInput(goal="small")), big])


def test_the_payload_limit_is_on_the_payload_not_its_envelope() -> None:
    # A payload just under the limit makes an envelope just over it: still accepted.
    payload_overhead = len(UserInput(goal="").model_dump_json())
    at_limit = EventDraft(payload=UserInput(goal="z" * (MAX_PAYLOAD_BYTES - payload_overhead)))
    assert len(stored_bytes([at_limit])[0]) > MAX_PAYLOAD_BYTES
    check([at_limit])


def test_a_batch_larger_than_one_transaction_is_refused() -> None:
    note = EventDraft(payload=Note(note_id="n", kind=NoteKind.FINDING, text="t"))
    check([note] * MAX_BATCH_EVENTS)
    with pytest.raises(PayloadTooLarge, match="smaller batches"):
        check([note] * (MAX_BATCH_EVENTS + 1))
    near_limit = EventDraft(payload=UserInput(goal="y" * (MAX_PAYLOAD_BYTES - 100)))
    with pytest.raises(PayloadTooLarge, match="transaction"):
        check([near_limit] * 20)


def test_a_spec_url_names_endpoints_and_prefix() -> None:
    store = open_etcd_event_store(
        {"backend": "etcd", "url": "etcd://127.0.0.1:1,127.0.0.1:2/tenant-a", "request_timeout": 1}
    )
    assert store.endpoints == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert store.prefix == "/tenant-a"
    assert store.request_timeout == 1.0
