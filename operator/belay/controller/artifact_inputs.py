"""`inputs[].artifact` in a cluster: another session's deliverable, proven by its record and pinned
in the consuming session's record before its first harness pod exists.

The source is a session of the consuming session's own namespace (its name is a DNS label, and
only `names.record_id(namespace, name)` is read), and the record read is the one bound to that
AgentSession's uid (`belay.controller.ownership`): a record left by an earlier session of the same
name is not its. Its record must prove the deliverable (`belay.journal.proof.usable_deliverable`),
a `sha256` the spec gives must be those bytes, and the bytes must be in the consuming session's
artifact store, where its harness reads them. The two sessions must use the same stores (both the
operator's, or the same `spec.stores`): the source's record is read from the consuming session's
event store, and a session on its own stores never reads the fleet's records.

The pin is a `session_link` of kind `input` (`deliverables`: name -> sha256), written once per
source and deliverable; the harness seeds the first sandbox from it, never from the spec, so a
source amended later changes nothing of what a resume restores. A refusal stalls the session
(`ArtifactInputRefused`), one line naming the source session and the deliverable, no pod made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from belay.api.agentsession import AgentSessionSpec
from belay.api.artifact_input import ArtifactInput
from belay.controller.desired import SessionRef
from belay.controller.kube import KubeClient
from belay.controller.names import record_id
from belay.controller.ownership import belongs_to, owner_after
from belay.controller.record import OPERATOR, RecordWrite
from belay.journal.events import Event, EventDraft, SessionLink, SessionLinkKind
from belay.journal.proof import usable_deliverable
from belay.journal.state import SessionState, fold
from belay.stores.base import ArtifactStore, EventStore


class ArtifactInputRefused(LookupError):
    pass


@dataclass(frozen=True)
class Source:
    """What the operator read of a source session: its AgentSession (None: there is none) and the
    record under its key in the consuming session's event store."""

    name: str
    body: dict[str, Any] | None
    events: Sequence[Event]


def artifact_inputs(spec: AgentSessionSpec) -> list[ArtifactInput]:
    """Every artifact input of the spec, once per source session and deliverable, in spec order."""
    found: dict[tuple[str, str], ArtifactInput] = {}
    for sub in spec.subagents:
        for item in sub.inputs:
            if item.artifact is not None:
                found.setdefault((item.artifact.session, item.artifact.deliverable), item.artifact)
    return list(found.values())


def pin_key(session: str, deliverable: str) -> str:
    return f"{session}/{deliverable}"


def unpinned(spec: AgentSessionSpec, state: SessionState) -> list[ArtifactInput]:
    """The artifact inputs the record holds no pin for yet."""
    return [a for a in artifact_inputs(spec) if pin_key(a.session, a.deliverable) not in state.input_pins]


def _stores_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in (spec.get("stores") or {}).items() if value is not None}


def pin_write(
    uid: str,
    namespace: str,
    name: str,
    spec: AgentSessionSpec,
    artifact: ArtifactInput,
    source: Source,
    stored: Callable[[str], bool],
) -> RecordWrite:
    """The pin of one artifact input, or ArtifactInputRefused (one line naming the source session
    and the deliverable). `stored(sha256)`: whether the consuming session's artifact store holds
    those bytes."""
    what = f"artifact input: deliverable {artifact.deliverable} of session {artifact.session}"
    if artifact.session == name:
        raise ArtifactInputRefused(f"{what}: a session cannot take its own deliverable as an input")
    if source.body is None:
        raise ArtifactInputRefused(f"{what}: there is no session {artifact.session} in namespace {namespace}")
    own = _stores_of(spec.model_dump(mode="json", by_alias=True))
    theirs = _stores_of(source.body.get("spec") or {})
    if own != theirs:
        mine = "its own stores (spec.stores)" if own else "the operator's stores"
        other = "its own stores" if theirs else "the operator's stores"
        raise ArtifactInputRefused(
            f"{what}: this session uses {mine} and session {artifact.session} uses {other}; a "
            "session takes a deliverable only of a session on the same stores"
        )
    source_uid = str((source.body.get("metadata") or {}).get("uid") or "")
    owner = owner_after(source.events)
    if not source.events or not belongs_to(owner, source_uid, len(source.events)):
        why = "it has no record yet" if not source.events else "its record was written for an earlier session"
        raise ArtifactInputRefused(f"{what}: {why} (record {record_id(namespace, artifact.session)})")
    ref, why = usable_deliverable(fold(source.events), artifact.deliverable)
    if ref is None:
        raise ArtifactInputRefused(f"{what}: {why}")
    if artifact.sha256 is not None and artifact.sha256 != ref.sha256:
        raise ArtifactInputRefused(
            f"{what}: the proven deliverable is sha256 {ref.sha256}, not the pinned {artifact.sha256}"
        )
    if not stored(ref.sha256):
        raise ArtifactInputRefused(
            f"{what}: its bytes (sha256 {ref.sha256}) are not in this session's artifact store"
        )
    link = SessionLink(
        kind=SessionLinkKind.INPUT,
        session=artifact.session,
        part="",
        deliverable=artifact.deliverable,
        deliverables={artifact.deliverable: ref.sha256},
    )
    key = f"input/{uid}/{pin_key(artifact.session, artifact.deliverable)}"
    return RecordWrite(key, (EventDraft(payload=link, actor=OPERATOR),))


async def artifact_pins(
    kube: KubeClient,
    store: EventStore,
    artifacts: ArtifactStore,
    ref: SessionRef,
    spec: AgentSessionSpec,
    state: SessionState,
) -> tuple[list[RecordWrite], str]:
    """The pins the record lacks, and why the first one that cannot be pinned cannot ("" when
    all can): only the consuming session's namespace is read, and its own event store."""
    writes = []
    for artifact in unpinned(spec, state):
        body = await kube.call(kube.get_session, ref.namespace, artifact.session)
        events = await store.read(record_id(ref.namespace, artifact.session))
        source = Source(artifact.session, body, events)
        args = (ref.uid, ref.namespace, ref.name, spec, artifact, source, artifacts.exists)
        try:
            # In a thread: the source's fold, and the artifact store's answer, block.
            writes.append(await asyncio.to_thread(pin_write, *args))
        except ArtifactInputRefused as refused:
            return writes, str(refused)
    return writes, ""
