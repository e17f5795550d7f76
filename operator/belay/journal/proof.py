"""What the record proves done: the one rule by which a session is Succeeded.

A harness that ends a session records that it completed; that is a claim, and the record is what
proves it or not. A session is Succeeded only if, for the current request version:

- every step is done, and its verification did not fail after the last invalidation (a scope
  change or a rejection reopens a step: it is done again in its next round, and only that round's
  checkpoint counts);
- every deliverable a subagent owes was published, is not empty, is not the very bytes a person
  rejected under its name, is still valid, and the step that published it (when one did) is
  itself proven by the rule above;
- every child session the coordinator started ended Succeeded, and the bytes collected from it are
  the ones its end names (its latest); no delegation failed.

`unproven` lists what is missing, each item saying it in words; `belay.journal.phase.phase_of`
reads it (a completed session with anything missing is NeedsAttention), and so does every view.
`step_unproven` and `deliverable_unproven` are the same rule for one step or one deliverable,
read by the classification of open items while the session still runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from belay.journal.events import ArtifactRef, TaskStatus
from belay.journal.state import SessionState, TaskRecord

DONE = (TaskStatus.DONE, TaskStatus.VERIFIED)
MissingKind = Literal["step", "deliverable", "child"]


@dataclass(frozen=True)
class Missing:
    kind: MissingKind
    id: str  # the step's task id, the deliverable's name, the child session's name
    what: str  # what is missing, in words

    def __str__(self) -> str:
        return self.what


def failed_verification(task: TaskRecord) -> str | None:
    """How a step's verification failed in its current round; None when it did not."""
    if task.status in DONE and task.verification == "failed":
        how = f" {task.verification_detail}" if task.verification_detail else ""
        return f"step {task.task_id}: its verification{how} failed"
    return None


def step_unproven(task: TaskRecord) -> str | None:
    """Why one step is not proven done; None when it is (or was cancelled)."""
    if task.status == TaskStatus.CANCELLED:
        return None
    if task.status == TaskStatus.FAILED:
        last = task.history[-1].detail if task.history else ""
        return f"step {task.task_id} failed" + (f": {last}" if last else "")
    if task.status not in DONE:
        reopened = f" since it was reopened ({task.reopened_because})" if task.reopened_seq else ""
        return f"step {task.task_id} is {task.status.value}{reopened}"
    return failed_verification(task)


def publishing_step(state: SessionState, name: str) -> TaskRecord | None:
    """The step whose call published a deliverable, when a step did."""
    artifact = state.artifacts.get(name)
    operation = state.operations.get(artifact.result_id) if artifact and artifact.result_id else None
    if operation is None or operation.step is None:
        return None
    return state.tasks.get(operation.step)


def rejected_bytes(state: SessionState, name: str, sha256: str) -> str | None:
    """Who turned down these very bytes under this name, and why; None when nobody did."""
    for rejection in reversed(state.rejections):
        if rejection.kind == "deliverable" and rejection.item == name and rejection.sha256 == sha256:
            return f"{rejection.by or 'a person'}" + (f": {rejection.reason}" if rejection.reason else "")
    return None


def deliverable_unproven(state: SessionState, name: str) -> str | None:
    """Why a published deliverable is not proven: empty, the very bytes a person rejected (the
    step that made them again is done, but what it owes still waits on the person), or published
    by a step whose verification failed; None when none of these (whether it is still valid is
    the fold's: an invalid one is withdrawn)."""
    artifact = state.artifacts.get(name)
    if artifact is None:
        return None
    if artifact.ref.size == 0:
        return f"deliverable {name} is empty (0 bytes, sha256 {artifact.ref.sha256[:12]})"
    rejected_by = rejected_bytes(state, name, artifact.ref.sha256)
    if rejected_by is not None:
        return (
            f"deliverable {name} is the same bytes as rejected (sha256 {artifact.ref.sha256[:12]}, "
            f"rejected by {rejected_by}): redone, it came out unchanged"
        )
    step = publishing_step(state, name)
    failed = failed_verification(step) if step is not None else None
    if failed is not None:
        return f"deliverable {name} was published by a step whose verification failed ({failed})"
    return None


def usable_deliverable(state: SessionState, name: str) -> tuple[ArtifactRef | None, str]:
    """A deliverable another session may take as an input: its bytes, when the record proves it
    (published under this name by a step that is itself proven done, and `deliverable_unproven`
    finds nothing against it); otherwise None and why not, in words."""
    artifact = state.artifacts.get(name)
    if artifact is None or not artifact.deliverable or name not in state.deliverables:
        for rejection in reversed(state.rejections):
            if rejection.kind == "deliverable" and rejection.item == name:
                by = rejection.by or "a person"
                reason = f": {rejection.reason}" if rejection.reason else ""
                return None, f"it was rejected by {by}{reason}, and is not published again since"
        return None, "it has no published deliverable of that name"
    step = publishing_step(state, name)
    if step is None:
        return None, "it was not published by a step of the session's plan, so nothing verified it"
    unproven_because = step_unproven(step) or deliverable_unproven(state, name)
    if unproven_because is not None:
        return None, f"the record does not prove it: {unproven_because}"
    return artifact.ref, ""


def _owed(state: SessionState, task: TaskRecord) -> Missing | None:
    owed = task.deliverable if task.task_id == task.owner else None
    if not owed:
        return None
    if owed not in state.deliverables:
        return Missing("deliverable", owed, f"deliverable {owed}, which {task.owner} owes, is not published")
    why = deliverable_unproven(state, owed)
    return Missing("deliverable", owed, why) if why else None


def _children(state: SessionState) -> list[Missing]:
    missing = []
    for name in sorted(state.children):
        link = state.children[name]
        if link.phase != "Succeeded":
            how = f"ended {link.phase}" if link.phase else f"has not ended (round {link.round})"
            missing.append(Missing("child", name, f"child session {name} {how}"))
            continue
        for own_name, sha256 in link.deliverables:
            collected = state.artifacts.get(f"{name}/{own_name}")
            if collected is None or collected.ref.sha256 != sha256:
                what = f"{own_name} of child session {name}: the bytes collected are not those it ended with"
                missing.append(Missing("child", name, what))
    return missing


def unproven(state: SessionState) -> list[Missing]:
    """Everything the record does not prove done, in plan order then children; empty when the
    session may be called Succeeded."""
    missing: list[Missing] = []
    for task in sorted(state.tasks.values(), key=lambda t: (t.first_seq, t.task_id)):
        why = step_unproven(task)
        if why is not None:
            missing.append(Missing("step", task.task_id, why))
        owed = _owed(state, task)
        if owed is not None:
            missing.append(owed)
    for delegation, operation_id in sorted(state.failed_delegations.items()):
        missing.append(Missing("child", delegation, f"{delegation} failed ({operation_id})"))
    return missing + _children(state)


def unproven_text(missing: list[Missing], limit: int = 3) -> str:
    """What is missing, in one line: the first few, and a count of the rest."""
    shown = "; ".join(m.what for m in missing[:limit])
    more = len(missing) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
