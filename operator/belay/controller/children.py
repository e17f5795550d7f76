"""The coordinator pattern in a cluster: a session starts child sessions for parts of its objective
(the harness records each with `start_session`), the operator creates each child's AgentSession
from that record, records the parent in the child's record, and when a child ends records in the
parent's record how it ended, its deliverables as the parent's artifacts (the same blobs, named
`<child>/<name>`), and the end of the parent's wait on it. Pure functions of the objects and the
folded states; the reconciler applies them."""

from __future__ import annotations

import copy
import posixpath
import re
from typing import Any

from belay.controller.record import RecordWrite
from belay.journal.events import (
    CHILD_CONDITION_PREFIX,
    CHILD_WAIT_PREFIX,
    Actor,
    Artifact,
    EventDraft,
    Payload,
    SessionLink,
    SessionLinkKind,
    Wait,
    WaitKind,
)
from belay.journal.phase import Phase, phase_of
from belay.journal.state import SessionLinkRecord, SessionState
from belay.views.fleet.model import OBJECTIVE_LABEL, PARENT_LABEL, PART_LABEL

OPERATOR = Actor(kind="operator", name="belay-operator")
# The part as it was asked (free text); the label carries it only when it is a valid label value.
PART_ANNOTATION = "belay.dev/part"
ENDED = (Phase.SUCCEEDED, Phase.FAILED)


def label_value(text: str) -> str:
    """`text` as a label value (at most 63 of `[-A-Za-z0-9_.]`, alphanumeric at both ends), or ''."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63]
    return value.strip("-_.")


def child_manifest(parent: dict[str, Any], link: SessionLinkRecord) -> dict[str, Any]:
    """The child's AgentSession: the parent's spec with the child's request (and plan), labelled
    with the objective, its parent and its part, owned by the parent."""
    meta = parent["metadata"]
    labels = meta.get("labels") or {}
    spec = copy.deepcopy(parent["spec"])
    spec["request"] = {"goal": link.goal}
    if link.plan:
        # A relative plan is the coordinator's sibling.
        base = posixpath.dirname(str(spec["executor"].get("plan") or ""))
        spec["executor"]["plan"] = posixpath.join(base, link.plan)
    for field in ("approvals", "rejections", "decisions", "forkFrom"):
        spec.pop(field, None)
    child_labels = {
        OBJECTIVE_LABEL: labels.get(OBJECTIVE_LABEL) or label_value(link.objective),
        PARENT_LABEL: meta["name"],
        PART_LABEL: label_value(link.part),
    }
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {
            "name": link.session,
            "namespace": meta["namespace"],
            "labels": {k: v for k, v in child_labels.items() if v},
            "annotations": {PART_ANNOTATION: link.part},
            "ownerReferences": owned_by(meta),
        },
        "spec": spec,
    }


def owned_by(meta: dict[str, Any]) -> list[dict[str, str]]:
    """The owner reference to an AgentSession: what it starts goes when it is deleted."""
    return [
        {"apiVersion": "belay.dev/v1alpha1", "kind": "AgentSession", "name": meta["name"], "uid": meta["uid"]}
    ]


def parent_link_write(uid: str, meta: dict[str, Any], state: SessionState) -> RecordWrite | None:
    """In a child's record, once: the session that started it, for which part of which objective."""
    labels = meta.get("labels") or {}
    parent = labels.get(PARENT_LABEL)
    if not parent or state.parent is not None:
        return None
    part = (meta.get("annotations") or {}).get(PART_ANNOTATION) or labels.get(PART_LABEL, "")
    link = SessionLink(
        kind=SessionLinkKind.PARENT, session=parent, part=part, objective=labels.get(OBJECTIVE_LABEL, "")
    )
    return RecordWrite(f"parent/{uid}", (EventDraft(payload=link, actor=OPERATOR),))


def child_ended_write(
    uid: str, state: SessionState, child: str, child_state: SessionState
) -> RecordWrite | None:
    """In the parent's record, once the child ended: how, its deliverables as the parent's
    artifacts, and the end of the parent's wait on it (if it waits already)."""
    link = state.children.get(child)
    phase = phase_of(child_state)
    if link is None or link.phase or phase not in ENDED:
        return None
    delivered = sorted((r for r in child_state.artifacts.values() if r.deliverable), key=lambda r: r.name)
    payloads: list[Payload] = [
        SessionLink(
            kind=SessionLinkKind.CHILD,
            session=child,
            part=link.part,
            objective=link.objective,
            phase=phase.value,
            deliverables={r.name: r.ref.sha256 for r in delivered},
        )
    ]
    for record in delivered:
        payloads.append(
            Artifact(
                name=f"{child}/{record.name}",
                ref=record.ref,
                deliverable=True,
                subagent=record.subagent,
                description=f"{record.name}, the deliverable of child session {child} ({link.part})",
            )
        )
    payloads += _wait_ended(state, child, phase.value)
    return RecordWrite(
        f"child-ended/{uid}/{child}", tuple(EventDraft(payload=p, actor=OPERATOR) for p in payloads)
    )


def child_wait_write(uid: str, state: SessionState, child: str) -> RecordWrite | None:
    """A wait the parent opened on a child that had already ended: ended now."""
    link = state.children.get(child)
    if link is None or not link.phase:
        return None
    payloads = _wait_ended(state, child, link.phase)
    if not payloads:
        return None
    opened = state.waits[f"{CHILD_WAIT_PREFIX}{child}"]
    return RecordWrite(
        f"child-wait/{uid}/{child}/{opened.opened_seq}",
        tuple(EventDraft(payload=p, actor=OPERATOR) for p in payloads),
    )


def _wait_ended(state: SessionState, child: str, phase: str) -> list[Payload]:
    wait = state.waits.get(f"{CHILD_WAIT_PREFIX}{child}")
    if wait is None or wait.resolved:
        return []
    return [
        Wait(
            wait_id=wait.wait_id,
            kind=WaitKind.ON_EXTERNAL,
            reason=f"{wait.reason} -> child session {child} {phase.lower()}",
            resolved=True,
            condition=f"{CHILD_CONDITION_PREFIX}{child}",
        )
    ]
