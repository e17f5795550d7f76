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

from belay.journal.events import Event, Summary, TaskStatus

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


def links(previous: Summary | None, events: Sequence[Event]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The events and artifacts a summary of `events` (after `previous`) relies on: finished
    steps, notes, artifacts, checkpoints, scope changes, decisions on approvals, rejections."""
    seqs: list[int] = list(previous.event_seqs) if previous else []
    blobs: list[str] = list(previous.artifacts) if previous else []
    for event in events:
        p: Any = event.payload
        match event.type:
            case "task" if p.status in (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.FAILED):
                seqs.append(event.seq)
            case "note" | "scope_change" | "approval" | "rejection":
                seqs.append(event.seq)
            case "artifact":
                seqs.append(event.seq)
                blobs.append(p.ref.sha256)
            case "checkpoint":
                seqs.append(event.seq)
                if p.patch is not None:
                    blobs.append(p.patch.sha256)
    return tuple(_newest(seqs, LINK_LIMIT)), tuple(_newest(blobs, LINK_LIMIT))


def _clip(text: str, limit: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def deterministic_text(previous: Summary | None, events: Sequence[Event]) -> str:
    """What the events say, by kind, newest names last; then the previous summary, clipped from its
    end (its oldest part) so the whole stays within SUMMARY_CHARS."""
    if not events:
        return previous.text if previous else ""
    counts = Counter(event.type for event in events)
    steps: list[str] = []
    artifacts: list[str] = []
    notes: list[str] = []
    checkpoints: list[str] = []
    scope: list[str] = []
    for event in events:
        p: Any = event.payload
        match event.type:
            case "task" if p.status in (TaskStatus.DONE, TaskStatus.VERIFIED, TaskStatus.FAILED):
                steps.append(f"{p.task_id} {p.status.value}")
            case "artifact":
                artifacts.append(f"{p.name} (sha256:{p.ref.sha256[:12]})")
            case "note" if p.status not in ("rejected", "superseded"):
                notes.append(f"{p.kind.value} {p.note_id}: {p.text[:80]}")
            case "checkpoint":
                checkpoints.append(p.checkpoint_id)
            case "scope_change":
                scope.append(f"v{p.request_version}: {p.summary[:80]}")
    by_type = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    parts = [f"seq {events[0].seq}-{events[-1].seq} ({len(events)} events: {by_type})."]
    for title, names in (
        ("Steps", steps),
        ("Artifacts", artifacts),
        ("Notes", notes),
        ("Checkpoints", checkpoints),
        ("Scope changes", scope),
    ):
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
