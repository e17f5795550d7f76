"""The coordinator pattern in a cluster: a session starts child sessions for parts of its objective
(the harness records each with `start_session`), the operator creates each child's AgentSession
from that record, records the parent in the child's record, and when a child ends records in the
parent's record how it ended, its deliverables as the parent's artifacts (the same blobs, named
`<child>/<name>`), and the end of the parent's wait on it. What each child is and owes is
`belay.harness.children`, which the embedded runtime reads too; here it becomes objects and record
writes keyed by the parent's uid."""

from __future__ import annotations

from typing import Any

from belay.controller.record import RecordWrite
from belay.harness.children import (
    PART_ANNOTATION,
    child_ended,
    child_labels,
    child_spec,
    child_wait_ended,
    parent_link,
    reopened_in_parent,
)
from belay.journal.events import Actor, EventDraft, Payload
from belay.journal.state import SessionLinkRecord, SessionState
from belay.views.fleet.model import OBJECTIVE_LABEL, PARENT_LABEL, PART_LABEL

OPERATOR = Actor(kind="operator", name="belay-operator")


def child_manifest(parent: dict[str, Any], link: SessionLinkRecord) -> dict[str, Any]:
    """The child's AgentSession: the parent's spec with the child's request (and plan), labelled
    with the objective, its parent and its part, owned by the parent."""
    meta = parent["metadata"]
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {
            "name": link.session,
            "namespace": meta["namespace"],
            "labels": child_labels(meta["name"], meta.get("labels") or {}, link),
            "annotations": {PART_ANNOTATION: link.part},
            "ownerReferences": owned_by(meta),
        },
        "spec": child_spec(parent["spec"], link),
    }


def owned_by(meta: dict[str, Any]) -> list[dict[str, str]]:
    """The owner reference to an AgentSession: what it starts goes when it is deleted."""
    return [
        {"apiVersion": "belay.dev/v1alpha1", "kind": "AgentSession", "name": meta["name"], "uid": meta["uid"]}
    ]


def parent_link_write(uid: str, meta: dict[str, Any], state: SessionState) -> RecordWrite | None:
    """In a child's record, once: the session that started it, for which part of which objective."""
    labels = meta.get("labels") or {}
    part = (meta.get("annotations") or {}).get(PART_ANNOTATION) or labels.get(PART_LABEL, "")
    link = parent_link(state, labels.get(PARENT_LABEL, ""), part, labels.get(OBJECTIVE_LABEL, ""))
    return None if link is None else _write(f"parent/{uid}", [link])


def child_ended_write(
    uid: str, state: SessionState, child: str, child_state: SessionState
) -> RecordWrite | None:
    """In the parent's record, once the child ended: how, its deliverables as the parent's
    artifacts, and the end of the parent's wait on it (if it waits already)."""
    payloads = child_ended(state, child, child_state)
    key = f"child-ended/{uid}/{child}/{child_state.last_seq}"  # a child that ends again: a new end
    return None if payloads is None else _write(key, payloads)


def reopen_in_parent_write(
    uid: str, parent_state: SessionState, child: str, child_state: SessionState
) -> RecordWrite | None:
    """In the parent's record, written by the child's pass (`uid` the child's): a person's amend or
    rejection of the child itself reopened its finished work, so the end the parent collected no
    longer stands and the parent collects the child's next one, as `belay amend` writes it on one
    machine (`belay.harness.children.reopened_in_parent`)."""
    reopening = reopened_in_parent(parent_state, child, child_state)
    if reopening is None:
        return None
    key, link = reopening
    return _write(f"{key}/{uid}", [link])


def child_wait_write(uid: str, state: SessionState, child: str) -> RecordWrite | None:
    """A wait the parent opened on a child that had already ended: ended now."""
    ended = child_wait_ended(state, child)
    if ended is None:
        return None
    opened_seq, payloads = ended
    return _write(f"child-wait/{uid}/{child}/{opened_seq}", payloads)


def _write(key: str, payloads: list[Payload]) -> RecordWrite:
    return RecordWrite(key, tuple(EventDraft(payload=p, actor=OPERATOR) for p in payloads))
