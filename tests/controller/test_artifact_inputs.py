"""`inputs[].artifact` in a cluster, the operator's side as pure functions on real stores (SQLite
records, a file artifact store): the pin of a proven deliverable in the consuming session's record,
what the harness seeds the first sandbox with (the record's pin, never the spec's), and each
refusal in one line naming the source session and the deliverable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from belay.api.agentsession import AgentSession, AgentSessionSpec
from belay.controller.artifact_inputs import ArtifactInputRefused, Source, pin_write, unpinned
from belay.controller.names import record_id
from belay.harness.declared import DeclaredInputs, with_recorded_pins
from belay.harness.git_input import InputUnavailable
from belay.journal.state import fold
from belay.stores.base import ArtifactStore, EventStore
from belay.stores.factory import open_artifact_store, open_event_store
from tests.controller.published import publish, reject
from tests.controller.sessions import spec_with

NAMESPACE = "team-a"
PRODUCER, CONSUMER = "producer", "consumer"
PRODUCER_UID, CONSUMER_UID = "uid-producer", "uid-consumer"
REPORT = b"# The report\nall numbers checked\n"


def consumer_spec(sha256: str | None = None, **more: Any) -> AgentSessionSpec:
    artifact = {"session": PRODUCER, "deliverable": "report.md"} | ({"sha256": sha256} if sha256 else {})
    return spec_with(
        subagents=[{"name": "reader", "inputs": [{"artifact": artifact, "target": "in"}]}], **more
    )


def producer_spec() -> AgentSessionSpec:
    return spec_with(subagents=[{"name": "writer"}])


def producer_body(uid: str = PRODUCER_UID, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": PRODUCER, "namespace": NAMESPACE, "uid": uid}, "spec": spec}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    opened = open_event_store({"backend": "sqlite", "path": str(tmp_path / "events.db")})
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def artifacts(tmp_path: Path) -> ArtifactStore:
    return open_artifact_store(f"file://{tmp_path / 'artifacts'}")


async def pin(
    store: EventStore,
    artifacts: ArtifactStore,
    spec: AgentSessionSpec,
    body: dict[str, Any] | None = None,
    namespace: str = NAMESPACE,
) -> None:
    """What the operator does for the consumer: read the source under the consumer's namespace,
    and write the pin into the consumer's record."""
    [artifact] = unpinned(spec, fold(await store.read(record_id(namespace, CONSUMER))))
    events = await store.read(record_id(namespace, artifact.session))
    source = Source(artifact.session, producer_body() if body is None else body, events)
    write = pin_write(CONSUMER_UID, namespace, CONSUMER, spec, artifact, source, artifacts.exists)
    await store.append(
        record_id(namespace, CONSUMER), list(write.drafts), idempotency_key=write.idempotency_key
    )


def seeded(spec: AgentSessionSpec, pins: Any, artifacts: ArtifactStore) -> list[tuple[str, bytes]]:
    """What the harness seeds the reader's first sandbox with, given the record's pins."""
    session = AgentSession.model_validate(
        {"metadata": {"name": CONSUMER, "namespace": NAMESPACE}, "spec": spec.model_dump(by_alias=True)}
    )
    return DeclaredInputs(with_recorded_pins(session, pins), None, artifacts)["reader"]


async def test_the_proven_deliverable_is_pinned_in_the_record_and_seeds_the_first_sandbox_after_an_amend(
    store: EventStore, artifacts: ArtifactStore
) -> None:
    producer = record_id(NAMESPACE, PRODUCER)
    proven = await publish(store, artifacts, producer, PRODUCER_UID, producer_spec(), REPORT)
    spec = consumer_spec()
    await pin(store, artifacts, spec)

    state = fold(await store.read(record_id(NAMESPACE, CONSUMER)))
    assert dict(state.input_pins) == {"producer/report.md": proven}
    assert unpinned(spec, state) == []
    assert seeded(spec, state.input_pins, artifacts) == [("in/report.md", REPORT)]

    # The producer is amended and publishes other bytes; the consumer's spec is edited to name
    # them: the record's pin alone decides what a resume restores.
    amended = await publish(store, artifacts, producer, PRODUCER_UID, producer_spec(), b"other\n", round_=2)
    assert amended != proven
    assert seeded(consumer_spec(sha256=amended), state.input_pins, artifacts) == [("in/report.md", REPORT)]
    # With no pin in the record, nothing is read, whatever the spec pins.
    with pytest.raises(InputUnavailable, match="has no pinned sha256"):
        seeded(consumer_spec(sha256=proven), {}, artifacts)


async def test_a_sha256_the_spec_gives_must_be_the_proven_bytes(
    store: EventStore, artifacts: ArtifactStore
) -> None:
    proven = await publish(
        store, artifacts, record_id(NAMESPACE, PRODUCER), PRODUCER_UID, producer_spec(), REPORT
    )
    with pytest.raises(ArtifactInputRefused) as refused:
        await pin(store, artifacts, consumer_spec(sha256="0" * 64))
    assert str(refused.value) == (
        "artifact input: deliverable report.md of session producer: the proven deliverable is sha256 "
        f"{proven}, not the pinned {'0' * 64}"
    )
    await pin(store, artifacts, consumer_spec(sha256=proven))
    assert fold(await store.read(record_id(NAMESPACE, CONSUMER))).input_pins["producer/report.md"] == proven


async def test_a_source_of_another_namespace_is_never_read(
    store: EventStore, artifacts: ArtifactStore
) -> None:
    await publish(store, artifacts, record_id(NAMESPACE, PRODUCER), PRODUCER_UID, producer_spec(), REPORT)
    # team-b's session of the same name has published nothing: team-a's record is not read.
    with pytest.raises(ArtifactInputRefused) as refused:
        await pin(store, artifacts, consumer_spec(), body=producer_body(uid="uid-b"), namespace="team-b")
    assert "it has no record yet (record team-b/producer)" in str(refused.value)


async def test_each_refusal_is_one_line_naming_the_source_and_the_deliverable(
    store: EventStore, artifacts: ArtifactStore, tmp_path: Path
) -> None:
    producer = record_id(NAMESPACE, PRODUCER)
    spec = consumer_spec()

    async def refusal(body: dict[str, Any] | None = None, own: ArtifactStore = artifacts) -> str:
        [artifact] = unpinned(spec, fold(await store.read(record_id(NAMESPACE, CONSUMER))))
        source = Source(PRODUCER, body, await store.read(producer))
        with pytest.raises(ArtifactInputRefused) as refused:
            pin_write(CONSUMER_UID, NAMESPACE, CONSUMER, spec, artifact, source, own.exists)
        line = str(refused.value)
        assert "\n" not in line and line.startswith(
            "artifact input: deliverable report.md of session producer: "
        )
        return line.split(": ", 2)[2]

    assert await refusal(None) == f"there is no session producer in namespace {NAMESPACE}"
    assert await refusal(producer_body()) == f"it has no record yet (record {producer})"
    proven = await publish(store, artifacts, producer, PRODUCER_UID, producer_spec(), REPORT)
    # A record written for an earlier session of that name is not this one's.
    assert await refusal(producer_body(uid="uid-new")) == (
        f"its record was written for an earlier session (record {producer})"
    )
    elsewhere = open_artifact_store(f"file://{tmp_path / 'elsewhere'}")
    assert await refusal(producer_body(), own=elsewhere) == (
        f"its bytes (sha256 {proven}) are not in this session's artifact store"
    )
    stores = {"events": "etcd://etcd:2379/team", "artifacts": "s3://team", "secretRef": "team-stores"}
    assert await refusal(producer_body(stores=stores)) == (
        "this session uses the operator's stores and session producer uses its own stores; a session "
        "takes a deliverable only of a session on the same stores"
    )
    await reject(store, producer, proven)
    assert (await refusal(producer_body())).startswith("it was rejected by dana: wrong numbers")


def test_a_session_on_its_own_stores_takes_only_from_a_session_on_the_same_stores() -> None:
    stores = {"events": "etcd://etcd:2379/team", "artifacts": "s3://team", "secretRef": "team-stores"}
    spec = consumer_spec(stores=stores)
    [artifact] = unpinned(spec, fold([]))
    source = Source(PRODUCER, producer_body(), ())
    with pytest.raises(
        ArtifactInputRefused, match=r"this session uses its own stores \(spec.stores\) and session "
    ):
        pin_write(CONSUMER_UID, NAMESPACE, CONSUMER, spec, artifact, source, lambda sha: True)
    # The very same stores: the source's record is read from them (here it has none yet).
    same = Source(PRODUCER, producer_body(stores=stores), ())
    with pytest.raises(ArtifactInputRefused, match="it has no record yet"):
        pin_write(CONSUMER_UID, NAMESPACE, CONSUMER, spec, artifact, same, lambda sha: True)
