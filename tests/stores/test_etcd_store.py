"""The etcd backend's key layout, read back with an independent etcd client, and its behaviour when
no member answers at all."""

from __future__ import annotations

import json
import socket
import uuid

import aetcd
import pytest

from belay.journal.events import EventDraft, Note, NoteKind, UserInput, event_from_json
from belay.stores.base import PayloadTooLarge, StoreUnavailable
from belay.stores.etcd import EtcdEventStore
from belay.stores.integrity import Chain


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


@pytest.mark.testenv
async def test_the_record_lies_in_etcd_at_the_documented_keys(etcd_endpoint: str) -> None:
    prefix = f"/layout-{uuid.uuid4().hex[:10]}"
    store = EtcdEventStore([etcd_endpoint], prefix=prefix)
    lease = await store.acquire_lease("team/a", "harness-1")
    await store.append("team/a", [EventDraft(payload=UserInput(goal="g")), note("n1")], lease=lease.number)
    [third] = await store.append(
        "team/a", [note("n2")], idempotency_key="step 3", lease=lease.number, claim="approval/x y"
    )
    await store.close()

    async with aetcd.Client(host="127.0.0.1", port=int(etcd_endpoint.rsplit(":", 1)[1])) as client:
        stored = {kv.key.decode(): kv.value for kv in await client.get_prefix(prefix.encode())}
    root = f"{prefix}/sessions/team%2Fa"
    assert sorted(stored) == sorted(
        [
            f"{prefix}/index/team%2Fa",
            f"{root}/head",
            f"{root}/lease",
            f"{root}/idem/step%203",
            f"{root}/claims/approval%2Fx%20y",
            f"{root}/latest/user_input",
            f"{root}/latest/note",
            *(f"{root}/events/{seq:020d}" for seq in (1, 2, 3)),
        ]
    )
    head = json.loads(stored[f"{root}/head"])
    assert (head["last_seq"], head["chain"]) == (3, third.chain)
    assert head["seal"] == Chain(None).seal(3, third.chain.encode()).decode()
    assert json.loads(stored[f"{root}/claims/approval%2Fx%20y"]) == {"seq": 3}
    assert json.loads(stored[f"{root}/lease"]) == {"number": 1, "holder": "harness-1"}
    assert json.loads(stored[f"{root}/latest/note"]) == {"seq": 3}
    idem = json.loads(stored[f"{root}/idem/step%203"])
    assert (idem["first_seq"], idem["last_seq"]) == (3, 3)
    assert stored[f"{root}/events/{3:020d}"].startswith(b'{"chain":"%s",' % third.chain.encode())
    assert event_from_json(stored[f"{root}/events/{3:020d}"]) == third
    assert third.seq == 3 and third.idempotency_key == "step 3"


async def test_no_member_answering_is_a_prompt_store_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    store = EtcdEventStore([f"http://127.0.0.1:{closed_port}"], request_timeout=0.2, operation_timeout=0.6)
    try:
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{closed_port}"):
            await store.append("s", [note("x")])
        with pytest.raises(StoreUnavailable):
            await store.read("s")
        # Limits are checked before any network call.
        with pytest.raises(PayloadTooLarge):
            await store.append("s", [EventDraft(payload=UserInput(goal="x" * 70_000))])
    finally:
        await store.close()


@pytest.mark.testenv
async def test_a_store_url_opens_the_same_record_as_a_spec(etcd_endpoint: str) -> None:
    from belay.stores import open_event_store

    prefix = f"/url-{uuid.uuid4().hex[:10]}"
    address = etcd_endpoint.removeprefix("http://")
    by_spec = open_event_store({"backend": "etcd", "endpoints": [etcd_endpoint], "prefix": prefix})
    by_url = open_event_store(f"etcd://{address},{address}{prefix}")
    try:
        written = await by_spec.append("s", [note("one"), note("two")])
        assert await by_url.read("s") == written
        assert await by_url.list_sessions() == ["s"]
    finally:
        await by_spec.close()
        await by_url.close()
