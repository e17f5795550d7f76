"""The interruption drill in a cluster, asked for with `kubectl belay drill NAME --at POINT...`:
the annotation `belay.dev/drill-request` on the session (JSON: a nonce and the fault points) makes
the operator start a copy of it, `<name>-drill-<nonce>`, whose k-th harness attempt stops itself
(SIGSTOP, so it stops renewing its lease) at the k-th point; the operator then replaces each
silent attempt as it does any lost one. When the copy ends, the session's status says whether it
passed: it completed, no step was completed and no operation requested or answered twice, and its
deliverables have the hashes of the session's own. Pure functions; the reconciler applies them."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from belay.api.status import DrillDeliverable, DrillStatus
from belay.controller import names
from belay.controller.children import owned_by
from belay.journal.events import Event
from belay.journal.phase import ENDED_PHASES, phase_of
from belay.journal.state import SessionState
from belay.journal.verdicts import completed, deliverables, steps_run_twice

DRILL_OF_LABEL = "belay.dev/drill-of"


class DrillRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nonce: str = Field(pattern=r"^[a-z0-9]{4,16}$")
    points: tuple[str, ...] = Field(min_length=1, max_length=16)


def drill_request(annotations: Mapping[str, str] | None) -> DrillRequest | None:
    """The request the annotation holds; None without one, or when it is malformed (the plugin
    writes it, so a malformed one was written by hand: it is ignored)."""
    raw = (annotations or {}).get(names.ANNOTATION_DRILL_REQUEST)
    if not raw:
        return None
    try:
        return DrillRequest.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return None


def drill_name(session: str, nonce: str) -> str:
    return f"{session[: 63 - len('-drill-') - len(nonce)]}-drill-{nonce}"


def drill_manifest(source: dict[str, Any], request: DrillRequest) -> dict[str, Any]:
    """The copy: the session's spec (its request, plan and approvals from the spec), a fresh record,
    the fault points in an annotation its harness pods read."""
    meta = source["metadata"]
    spec = copy.deepcopy(source["spec"])
    for field in ("rejections", "decisions", "forkFrom"):
        spec.pop(field, None)
    return {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {
            "name": drill_name(meta["name"], request.nonce),
            "namespace": meta["namespace"],
            "labels": {DRILL_OF_LABEL: meta["name"]},
            "annotations": {names.ANNOTATION_FAULT_POINTS: ",".join(request.points)},
            "ownerReferences": owned_by(meta),
        },
        "spec": spec,
    }


def fault_point(annotations: Mapping[str, str] | None, state: SessionState) -> str | None:
    """Where the next harness attempt of a drill copy stops itself: the k-th point for the k-th
    attempt (k counted by the losses recorded so far); None past the last point, or for a session
    that is no drill copy."""
    raw = (annotations or {}).get(names.ANNOTATION_FAULT_POINTS)
    points = [p for p in (raw or "").split(",") if p]
    losses = state.lifecycle.harness_lost
    return points[losses] if losses < len(points) else None


def drill_status(
    request: DrillRequest,
    session: str,
    copy_state: SessionState,
    copy_events: Sequence[Event] | None,
    source: SessionState,
) -> DrillStatus:
    """Where the drill stands; with the copy's events (once it ended), the verdict."""
    phase = phase_of(copy_state)
    status = DrillStatus(
        request=request.nonce,
        session=session,
        points=list(request.points),
        phase=phase.value,
        attempts_lost=copy_state.lifecycle.harness_lost,
    )
    if copy_events is None or phase not in ENDED_PHASES:
        return status
    theirs = {name: record.ref.sha256 for name, record in source.artifacts.items() if record.deliverable}
    ours = deliverables(copy_events)
    items = [
        DrillDeliverable(name=name, sha256=ours.get(name, ""), source_sha256=theirs.get(name, ""))
        for name in sorted(set(theirs) | set(ours))
    ]
    twice = steps_run_twice(copy_events)
    same = all(i.sha256 and i.sha256 == i.source_sha256 for i in items)
    return status.model_copy(
        update={
            "steps_run_twice": twice,
            "deliverables": items,
            "passed": completed(copy_events) and not twice and same and bool(items),
        }
    )
