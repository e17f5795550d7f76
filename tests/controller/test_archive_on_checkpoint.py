"""The operator archives a session's closed events to segments when it follows a checkpoint in the
record (`SessionReconciler._follow` calls `belay.stores.etcd.archive_closed`), against a real
control plane, etcd member and S3 server; the record it goes on folding reads as before."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aetcd
import pytest

from belay.controller import names
from belay.controller.desired import SessionRef
from belay.controller.kube import KubeClient, load_api_client
from belay.controller.reconciler import SessionMemory, SessionReconciler
from belay.controller.settings import OperatorSettings
from belay.journal.events import Checkpoint, EventDraft, Note, NoteKind, Verification
from belay.journal.state import fold
from belay.stores import open_event_store
from belay.stores.etcd import EtcdEventStore
from tests.api.kubehelpers import install_crds
from tests.conformance.backends import s3_spec
from tests.testenv.kube import ControlPlane
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-archive"
KEEP, PER_SEGMENT = 4, 3


@pytest.fixture
async def store(etcd_endpoint: str, s3_server: S3Server) -> AsyncIterator[EtcdEventStore]:
    prefix = f"/archive-on-checkpoint-{uuid.uuid4().hex[:10]}"
    opened = open_event_store(
        {
            "backend": "etcd",
            "endpoints": [etcd_endpoint],
            "prefix": prefix,
            "keep_events": KEEP,
            "segment_events": PER_SEGMENT,
            "segments": s3_spec(s3_server, "belay-archive-on-checkpoint", prefix.strip("/")),
        }
    )
    assert isinstance(opened, EtcdEventStore)
    try:
        yield opened
    finally:
        await opened.close()
        async with aetcd.Client(host="127.0.0.1", port=int(etcd_endpoint.rsplit(":", 1)[1])) as client:
            await client.delete_prefix(prefix.encode() + b"/")


def note(text: str) -> EventDraft:
    return EventDraft(payload=Note(note_id=text, kind=NoteKind.FINDING, text=text))


async def test_the_operator_archives_closed_events_after_it_follows_a_checkpoint(
    kube: ControlPlane, store: EtcdEventStore
) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE, check=False)
    client = KubeClient(load_api_client(str(kube.kubeconfig)), field_manager=names.FIELD_MANAGER)
    reconciler = SessionReconciler(client, OperatorSettings())
    ref = SessionRef(name=f"archived-{uuid.uuid4().hex[:6]}", namespace=NAMESPACE, uid=str(uuid.uuid4()))
    memory = SessionMemory()

    record = names.record_id(ref.namespace, ref.name)
    # Bound to the session as its fork's copy would be: the operator follows only its own record.
    await store.append(record, [note(f"n{i}") for i in range(20)], idempotency_key=f"fork/{ref.uid}")
    await reconciler._follow(store, ref, memory)
    assert await store.segments_of(record) == [], "no checkpoint followed yet: nothing archived"

    checkpoint = Checkpoint(
        checkpoint_id="cp-1", covers_seq=20, verification=Verification(command="pytest", status="passed")
    )
    await store.append(record, [EventDraft(payload=checkpoint)])
    await reconciler._follow(store, ref, memory)
    segments = await store.segments_of(record)
    assert [(s.first, s.last) for s in segments] == [(1, 3), (4, 6), (7, 9), (10, 12), (13, 15)]
    assert memory.state == fold(await store.read(record))
    assert memory.state.last_seq == 21
