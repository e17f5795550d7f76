"""Compaction: a `summary` event that stands in the model's context for the events before its
recent window, without ever replacing them.

The context (`belay.journal.context`) shows the newest summary, then the recent events read from
the record's tail. The events between the two are shown to the model by neither: once they
outnumber `COMPACT_AFTER_EVENTS`, the self-hosted executor records a new summary covering every
event up to the window's start. Each summary folds in the one before it, so the newest covers the
whole history before the window; the record keeps every event it covers, and the summary names
them (its seq range) and links the events and artifacts it draws on.

A compaction reads only the events it adds (at most the window, the threshold and one turn's
events), so its cost, like the context's, does not grow with the length of the record. The text
is made by the model for model executors (`belay.executors.self_hosted`), and from the events for
the scripted one (`deterministic_text`), so a scripted session's record is reproducible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from belay.journal.dispatch import handler_table
from belay.journal.events import (
    ApprovalEvent,
    ArtifactEvent,
    CheckpointEvent,
    Event,
    NoteEvent,
    RejectionEvent,
    ScopeChangeEvent,
    Summary,
    TaskEvent,
    TaskStatus,
)

RECENT_WINDOW_EVENTS = 200  # the events the context reads from the tail
COMPACT_AFTER_EVENTS = 200  # events outside the window and not yet summarised, at most
SUMMARY_CHARS = 2000  # the context shows up to 2400 characters of a summary
LINK_LIMIT = 64  # linked events and artifacts kept, the newest
LIST_LIMIT = 12  # names listed per kind in a deterministic summary, the newest
DETERMINISTIC = "deterministic"


def compaction_due(
    last_seq: int,
    covered_to_seq: int,
    *,
    window: int = RECENT_WINDOW_EVENTS,
    threshold: int = COMPACT_AFTER_EVENTS,
) -> int | None:
    """The seq a new summary should cover up to, or None while the events outside the window that
    no summary covers are at most `threshold`."""
    boundary = last_seq - window
    return boundary if boundary - covered_to_seq > threshold else None


def _newest(items: Sequence[Any], limit: int) -> list[Any]:
    """Distinct items, the newest `limit`, in order of their last appearance."""
    last: dict[Any, int] = {item: index for index, item in enumerate(items)}
    return sorted(last, key=last.__getitem__)[-limit:]


# What a summary links to: the seqs of the events it draws on and the sha256 of their artifacts.
Links = tuple[tuple[int, ...], tuple[str, ...]]

_FINISHED = (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.FAILED)


def _links_of_step(e: TaskEvent) -> Links:
    return ((e.seq,), ()) if e.payload.status in _FINISHED else ((), ())


def _links_of_decision(e: NoteEvent | ScopeChangeEvent | ApprovalEvent | RejectionEvent) -> Links:
    return (e.seq,), ()


def _links_of_artifact(e: ArtifactEvent) -> Links:
    return (e.seq,), (e.payload.ref.sha256,)


def _links_of_checkpoint(e: CheckpointEvent) -> Links:
    patch = e.payload.patch
    return (e.seq,), (patch.sha256,) if patch is not None else ()


_LINKS = handler_table(_links_of_step, _links_of_decision, _links_of_artifact, _links_of_checkpoint)


def links(previous: Summary | None, events: Sequence[Event]) -> Links:
    """The events and artifacts a summary of `events` (after `previous`) relies on: finished
    steps, notes, artifacts, checkpoints, scope changes, decisions on approvals, rejections."""
    seqs: list[int] = list(previous.event_seqs) if previous else []
    blobs: list[str] = list(previous.artifacts) if previous else []
    for event in events:
        linked = _LINKS.get(type(event))
        if linked is not None:
            more_seqs, more_blobs = linked(event)
            seqs.extend(more_seqs)
            blobs.extend(more_blobs)
    return tuple(_newest(seqs, LINK_LIMIT)), tuple(_newest(blobs, LINK_LIMIT))


def _clip(text: str, limit: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The sections of a deterministic summary, in the order it lists them.
SECTIONS = ("Steps", "Artifacts", "Notes", "Checkpoints", "Scope changes")


def _step_line(e: TaskEvent) -> tuple[str, str] | None:
    p = e.payload
    return ("Steps", f"{p.task_id} {p.status.value}") if p.status in _FINISHED else None


def _artifact_line(e: ArtifactEvent) -> tuple[str, str] | None:
    p = e.payload
    return "Artifacts", f"{p.name} (sha256:{p.ref.sha256[:12]})"


def _note_line(e: NoteEvent) -> tuple[str, str] | None:
    p = e.payload
    if p.status in ("rejected", "superseded"):
        return None
    return "Notes", f"{p.kind.value} {p.note_id}: {p.text[:80]}"


def _checkpoint_line(e: CheckpointEvent) -> tuple[str, str] | None:
    return "Checkpoints", e.payload.checkpoint_id


def _scope_line(e: ScopeChangeEvent) -> tuple[str, str] | None:
    p = e.payload
    return "Scope changes", f"v{p.request_version}: {p.summary[:80]}"


# Each returns the section an event is listed in and its line there, or None when it is not.
_LINES = handler_table(_step_line, _artifact_line, _note_line, _checkpoint_line, _scope_line)


def deterministic_text(previous: Summary | None, events: Sequence[Event]) -> str:
    """What the events say, by kind, newest names last; then the previous summary, clipped from its
    end (its oldest part) so the whole stays within SUMMARY_CHARS."""
    if not events:
        return previous.text if previous else ""
    counts = Counter(event.type for event in events)
    sections: dict[str, list[str]] = {title: [] for title in SECTIONS}
    for event in events:
        line = _LINES.get(type(event))
        found = line(event) if line is not None else None
        if found is not None:
            title, text = found
            sections[title].append(text)
    by_type = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    parts = [f"seq {events[0].seq}-{events[-1].seq} ({len(events)} events: {by_type})."]
    for title, names in sections.items():
        if names:
            shown = names[-LIST_LIMIT:]
            earlier = f" (and {len(names) - len(shown)} earlier)" if len(names) > len(shown) else ""
            parts.append(f"{title}{earlier}: {'; '.join(shown)}.")
    text = " ".join(parts)
    if previous is not None:
        text += f" Before that, {previous.text}"
    return _clip(text)


def summary_of(
    previous: Summary | None,
    previous_seq: int | None,
    events: Sequence[Event],
    text: str,
    *,
    made_by: str = DETERMINISTIC,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> Summary:
    event_seqs, artifacts = links(previous, events)
    return Summary(
        covers_from_seq=previous.covers_from_seq if previous else events[0].seq,
        covers_to_seq=events[-1].seq,
        text=_clip(text),
        previous_seq=previous_seq,
        event_seqs=event_seqs,
        artifacts=artifacts,
        made_by=made_by,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )
