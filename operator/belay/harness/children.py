"""Which child sessions a coordinator's record started, and what each owes: written once, read by
whoever starts the children (the operator in a cluster, `belay.local.children` on one machine).

A coordinator's `start_session` records a link (`SessionLink`, kind child) naming the child, the
part of the objective it does, its goal, its plan and the deliverable it owes. From that link and
the coordinator's spec come the child's spec and labels; from the child's folded record come the
events written back: the parent in the child's record (once), and in the coordinator's record how
the child ended, its deliverables as the coordinator's artifacts (`<child>/<name>`) and the end of
the coordinator's wait on it. Pure functions of specs and folded states; the callers write.
"""

from __future__ import annotations

import copy
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from belay.journal.decisions import resolved_wait
from belay.journal.events import (
    CHILD_WAIT_PREFIX,
    Artifact,
    Payload,
    Rejection,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
)
from belay.journal.phase import Phase, phase_of
from belay.journal.proof import deliverable_unproven
from belay.journal.state import ArtifactRecord, SessionLinkRecord, SessionState
from belay.views.fleet.model import OBJECTIVE_LABEL, PARENT_LABEL, PART_LABEL

# A child that needs attention has ended too: its coordinator stops waiting on it, collects none of
# what its record does not prove, and is not Succeeded while it is not (belay.journal.proof).
ENDED = (Phase.SUCCEEDED, Phase.NEEDS_ATTENTION, Phase.FAILED)
# The part as it was asked (free text), on the child's manifest: a label carries it only when it
# is a valid label value.
PART_ANNOTATION = "belay.dev/part"
# The spec fields a child does not inherit: decisions given for the coordinator's own payloads.
NOT_INHERITED = ("approvals", "rejections", "decisions", "forkFrom")


def label_value(text: str) -> str:
    """`text` as a label value (at most 63 of `[-A-Za-z0-9_.]`, alphanumeric at both ends), or ''."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63]
    return value.strip("-_.")


def child_labels(parent: str, parent_labels: dict[str, str], link: SessionLinkRecord) -> dict[str, str]:
    """The child's labels: the objective it serves, its parent and its part."""
    labels = {
        OBJECTIVE_LABEL: parent_labels.get(OBJECTIVE_LABEL) or label_value(link.objective),
        PARENT_LABEL: parent,
        PART_LABEL: label_value(link.part),
    }
    return {k: v for k, v in labels.items() if v}


def child_parts(parent_parts: Mapping[str, str], link: SessionLinkRecord) -> dict[str, str]:
    """The child's request parts: the coordinator's part of the same name, when it has one. A
    change of that part in the coordinator's request is a change of the child's (`reopened`)."""
    return {link.part: parent_parts[link.part]} if link.part in parent_parts else {}


# A subagent's role is at most this long (`SubagentSpec.role`); a child's longer goal is cut for it.
ROLE_LIMIT = 1024


def shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def child_spec(
    parent_spec: dict[str, Any],
    link: SessionLinkRecord,
    plan_base: str | None = None,
    parent_parts: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The child's spec (API spelling): the coordinator's, with the child's request (its goal and
    its part of the coordinator's request as it stands, `parent_parts`, by default the spec's), its
    plan (a relative plan is read from `plan_base`, by default the directory of the coordinator's
    plan) and the deliverable it owes, declared on its first subagent (whose role is the child's
    goal) so that the child completes only once it is published."""
    spec = copy.deepcopy(parent_spec)
    if parent_parts is None:
        parent_parts = spec.get("request", {}).get("parts") or {}
    spec["request"] = {"goal": link.goal}
    parts = child_parts(parent_parts, link)
    if parts:
        spec["request"]["parts"] = parts
    if link.plan:
        base = (
            plan_base if plan_base is not None else posixpath.dirname(str(spec["executor"].get("plan") or ""))
        )
        spec["executor"]["plan"] = posixpath.join(base, link.plan)
    if spec.get("subagents"):
        # The first subagent does the child's part: its role (the title of its task on the page,
        # what a model is told it is) is the child's goal, never the coordinator's role of
        # starting and gathering children.
        spec["subagents"][0]["role"] = shortened(link.goal, ROLE_LIMIT)
        if link.deliverable:
            spec["subagents"][0]["deliverable"] = link.deliverable
    for field in NOT_INHERITED:
        spec.pop(field, None)
    return spec


def parent_link(state: SessionState, parent: str, part: str, objective: str) -> SessionLink | None:
    """In a child's record, once: the session that started it, for which part of which objective."""
    if not parent or state.parent is not None:
        return None
    return SessionLink(kind=SessionLinkKind.PARENT, session=parent, part=part, objective=objective)


def unfinished(state: SessionState) -> list[SessionLinkRecord]:
    """The children the coordinator's record started whose end it has not recorded yet."""
    return [link for _, link in sorted(state.children.items()) if not link.phase]


def owed_missing(link: SessionLinkRecord, child_state: SessionState) -> str:
    """The deliverable the child owes and has not published ('' when none is missing)."""
    if link.deliverable and link.deliverable not in child_state.deliverables:
        return link.deliverable
    return ""


def proven_deliverables(child_state: SessionState) -> list[ArtifactRecord]:
    """The deliverables of a child that its record proves: published, valid, not empty, made by a
    step whose verification did not fail, not the bytes a person rejected."""
    return sorted(
        (
            r
            for r in child_state.artifacts.values()
            if r.deliverable
            and r.name in child_state.deliverables
            and not deliverable_unproven(child_state, r.name)
        ),
        key=lambda r: r.name,
    )


def child_ended(state: SessionState, child: str, child_state: SessionState) -> list[Payload] | None:
    """In the coordinator's record, once the child ended: how, its deliverables as the
    coordinator's artifacts, and the end of the coordinator's wait on it (if it waits already).
    None while the child runs, or once this very end is recorded; a child that ended again since
    (redone after a rejection or an amend of its own) is recorded again, its new bytes collected."""
    link = state.children.get(child)
    phase = phase_of(child_state)
    if link is None or phase not in ENDED:
        return None
    delivered = proven_deliverables(child_state)
    if link.phase and (link.phase, link.deliverables) == (
        phase.value,
        tuple(sorted((r.name, r.ref.sha256) for r in delivered)),
    ):
        return None
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
    return payloads + wait_ended(state, child, phase.value)


def reopened_in_parent(
    state: SessionState, child: str, child_state: SessionState
) -> tuple[str, SessionLink] | None:
    """In the coordinator's record (folded in `state`), after a person's amend or rejection of the
    child session itself reopened its finished work: the child reopened, so the coordinator no
    longer counts the end it collected (its bytes are invalid there) and collects the child's next
    end. (A key naming this reopening, the link.) None when the coordinator recorded no end of the
    child, or the child is ended now (nothing reopened it since, or it ended again)."""
    link = state.children.get(child)
    reopened_at = child_state.lifecycle.reopened_seq
    if link is None or not link.phase or reopened_at is None or phase_of(child_state) in ENDED:
        return None
    again = SessionLink(kind=SessionLinkKind.CHILD, session=child, part=link.part, reopened=True)
    return f"reopen/{child}/{reopened_at}", again


def child_wait_ended(state: SessionState, child: str) -> tuple[int, list[Payload]] | None:
    """A wait the coordinator opened on a child that had already ended: (the seq it was last
    opened at, the events that end it), or None."""
    link = state.children.get(child)
    if link is None or not link.phase:
        return None
    payloads = wait_ended(state, child, link.phase)
    if not payloads:
        return None
    return state.waits[f"{CHILD_WAIT_PREFIX}{child}"].last_seq, payloads


def wait_ended(state: SessionState, child: str, phase: str) -> list[Payload]:
    wait = state.waits.get(f"{CHILD_WAIT_PREFIX}{child}")
    if wait is None or wait.resolved:
        return []
    return [resolved_wait(wait, f"child session {child} {phase.lower()}")]


@dataclass(frozen=True)
class Reopening:
    """A child whose part a scope change of the coordinator's request changed: the scope change
    recorded in the child's record, and the link recorded in the coordinator's."""

    child: str
    change: ScopeChange
    link: SessionLink


def reopened(
    parent: str,
    state: SessionState,
    change: ScopeChange,
    children: Mapping[str, SessionState],
    by: str,
) -> list[Reopening]:
    """Exactly the children whose part `change` (request version N+1 of the coordinator `parent`,
    folded in `state`) changed or removed; `children` holds each child's folded record. A child
    whose request already says so (a second pass) is not reopened again."""
    touched = set(change.changed_parts) | set(change.removed_parts)
    found = []
    for name, link in sorted(state.children.items()):
        child = children.get(name)
        if not link.depends_on(touched) or child is None or not child.request.version:
            continue
        wanted = child_parts(state.request.parts, link)
        if dict(child.request.parts) == wanted:
            continue
        removed = tuple(p for p in child.request.parts if p not in wanted)
        scope = ScopeChange(
            request_version=child.request.version + 1,
            summary=f"{link.part} changed in request v{change.request_version} of {parent}",
            changed_parts={k: v for k, v in wanted.items() if child.request.parts.get(k) != v},
            removed_parts=removed,
            by=by,
        )
        again = SessionLink(kind=SessionLinkKind.CHILD, session=name, part=link.part, reopened=True)
        found.append(Reopening(name, scope, again))
    return found


@dataclass(frozen=True)
class CollectedRejection:
    """A person turned down a deliverable the coordinator collected from a child: the rejection
    recorded in the child's record (its step is redone with the reason, as a rejection there is),
    and in the coordinator's the same rejection with the link reopened (the step that awaited the
    child is redone, and waits for the child's next end)."""

    child: str
    in_child: Rejection
    in_coordinator: tuple[Rejection, SessionLink]


def collected_rejection(
    state: SessionState, name: str, sha256: str, reason: str, by: str
) -> CollectedRejection | None:
    """The rejection of the collected deliverable `name` (the bytes `sha256`) of the coordinator
    folded in `state`, or None when `name` is not one."""
    link = state.collected_from(name)
    if link is None or state.artifacts[name].ref.sha256 != sha256:
        return None
    own_name = name.partition("/")[2]
    again = SessionLink(kind=SessionLinkKind.CHILD, session=link.session, part=link.part, reopened=True)
    return CollectedRejection(
        child=link.session,
        in_child=Rejection(name=own_name, sha256=sha256, reason=reason, by=by),
        in_coordinator=(Rejection(name=name, sha256=sha256, reason=reason, by=by), again),
    )
