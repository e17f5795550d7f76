"""The laws of the page a person returns to: what no briefing, fleet or objective view may say.

Each law is a check on a built model (and, where a count is printed, on its rendering); `broken`
returns the laws a page breaks, each with what breaks it. The property tests check them at every
position of random and recorded session records (tests/views/test_laws.py); docs/cli.md lists them
for a person ("The page never contradicts itself").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from belay.journal.phase import ENDED_PHASES, Phase
from belay.views.briefing.model import Briefing
from belay.views.briefing.render import Row, render_rows
from belay.views.fleet.model import FleetView, ObjectiveView


@dataclass(frozen=True)
class Broken:
    law: str
    detail: str

    def __str__(self) -> str:
        return f"{self.law}: {self.detail}"


# What the command that ends each kind of wait runs: the word after the program.
VERB = {
    "approval": ("approve", "reject"),
    "decision": ("answer", "reject"),
    "reconciliation": ("reconcile", "reconcile"),
    "message": ("message", "reject"),
}
ENDED = (*ENDED_PHASES, Phase.RECOVERY_FAILED)
UNFINISHED = ("planned", "running", "blocked")


def _verb(command: str | None) -> str | None:
    """`belay approve ...` and `kubectl belay approve ...` both give "approve"."""
    if not command:
        return None
    words = command.split()
    at = words.index("belay") + 1 if "belay" in words else 0
    return words[at] if at < len(words) else None


def one_class(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """Every item is one thing: listed once, and in the one section of its class."""
    seen: set[tuple[str, str]] = set()
    for item in b.items:
        if (item.kind, item.id) in seen:
            yield f"{item.kind} {item.id} is classified twice"
        seen.add((item.kind, item.id))
    sections = {
        "running": [r.id for r in b.running],
        "waiting_on_you": [a.id for a in b.waiting_on_you],
        "waiting_on_external": [e.wait_id for e in b.waiting_on_external],
        "ready_for_review": [r.name for r in b.ready_for_review],
    }
    for state, listed in sections.items():
        expected = [i.label if state == "ready_for_review" else i.id for i in b.items if i.state == state]
        if sorted(listed) != sorted(expected):
            yield f"section {state} lists {sorted(listed)}, the classification {sorted(expected)}"
    placed: dict[str, str] = {}
    for state, listed in sections.items():
        for item_id in listed:
            if item_id in placed and placed[item_id] != state:
                yield f"{item_id} is listed under {placed[item_id]} and under {state}"
            placed[item_id] = state
    for attention in b.needs_attention:
        if attention.id in sections["running"]:
            yield f"{attention.id} is running and needs attention"


def wait_has_its_command(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """Every wait names the command that ends it, specific to its kind."""
    for a in b.waiting_on_you:
        verb, alternative = VERB[a.kind]
        if _verb(a.command) != verb:
            yield f"{a.kind} {a.id} is ended by `{verb}`, the page says `{a.command}`"
        if alternative and _verb(a.alternative) != alternative:
            yield f"{a.kind} {a.id} has no `{alternative}` alternative (`{a.alternative}`)"
        if a.kind == "message" and _verb(a.also) != "amend":
            yield f"message {a.id} does not name the amend that also answers it (`{a.also}`)"
    # A wait on a child session nothing runs names what resumes the child, as its record says.
    resumes = {c.command for c in b.children if c.command}
    for e in b.waiting_on_external:
        if _verb(e.command) not in ("approve", "brief") and e.command not in resumes:
            yield f"external wait {e.wait_id} has no command that marks it met (`{e.command}`)"
    for r in b.ready_for_review:
        if _verb(r.command) != "artifacts" or _verb(r.alternative) != "reject":
            yield f"review {r.name} lacks its download and reject commands"


def ended_runs_nothing(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A session that ended, or has no live attempt, lists nothing as running."""
    if b.running and (b.phase in ENDED or b.interruption is not None):
        yield f"phase {b.phase.value} lists {[r.id for r in b.running]} as running"


_COUNTED = re.compile(r"\((\d+) [^)]*\):$")
_MORE = re.compile(r"^\.\.\. and ([\d,]+) more")


def counts_match_lines(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A count printed in a heading equals the lines under it ("... and N more" counts N)."""
    for index, (level, text) in enumerate(rows):
        match = _COUNTED.search(text)
        if match is None:
            continue
        lines = 0
        for deeper, line in rows[index + 1 :]:
            if deeper <= level:
                break
            if deeper == level + 1:
                more = _MORE.match(line)
                lines += int(more.group(1).replace(",", "")) if more else 1
        if lines != int(match.group(1)):
            yield f"{text!r} counts {match.group(1)}, {lines} lines follow"


def rejected_bytes_wait(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """Bytes a person rejected under a name are never ready for review under it again: redone
    unchanged, they wait on the person ("the same bytes as rejected", under needs attention)."""
    rejected = {(r.item, r.sha256) for r in b.rejections if r.kind == "deliverable"}
    for review in b.ready_for_review:
        if (review.name, review.sha256) in rejected:
            yield f"{review.name} ({review.sha256}) is the rejected bytes, offered for review again"


def lost_means_lost(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """An attempt the page calls interrupted is never also "no attempt lost"."""
    if b.interruption is not None and any("no attempt lost" in text for _, text in rows):
        yield f"attempt {b.interruption.attempt} is interrupted and the page says no attempt was lost"


def next_per_subagent(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A resume names, for every subagent with steps left, the step it goes on from."""
    gone = b.interruption
    if gone is None or not gone.command:
        return
    resumes = {p.subagent: p.step for p in gone.resumes}
    for step in b.steps:
        left = step.owner and step.task_id != step.owner and step.status.value in UNFINISHED
        if left and step.owner not in resumes:
            yield f"{step.owner} has {step.task_id} left and the resume names no step for it"
    finished = {s.task_id for s in b.steps if s.status.value not in UNFINISHED}
    for subagent, resumed in resumes.items():
        if resumed in finished:
            yield f"{subagent} is said to go on from {resumed}, which is finished"


def reopened_is_no_interruption(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A session reopened by an amend or a rejection waits for a resume of its request: Pending,
    never Interrupted."""
    gone = b.interruption
    if gone is not None and "was reopened" in gone.why and b.phase != Phase.PENDING:
        yield f"a reopened session reads {b.phase.value}: {gone.why}"


def succeeded_means_done(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A session that succeeded has nothing that needs attention (a failed delegation included)."""
    if b.phase == Phase.SUCCEEDED:
        for item in b.items:
            if item.state in ("running", "needs_attention"):
                yield f"succeeded, and {item.kind} {item.id} is {item.state}"
        for attention in b.needs_attention:
            if attention.kind == "failed_delegation":
                yield f"succeeded, and delegation {attention.id} failed"


def done_means_delivered(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A subagent is listed done only when what it owes exists: its deliverable published (or
    ready for review); one whose turn ended without it waits on you instead."""
    published = {i.id for i in b.items if i.kind == "deliverable" and i.state == "done"}
    published |= {r.name for r in b.ready_for_review}
    for step in b.steps:
        owes = step.deliverable if step.task_id == step.owner else None
        if step.status.value in ("done", "verified") and owes and owes not in published:
            yield f"{step.task_id} is listed {step.status.value} and {owes} does not exist"


DONE_STATUSES = ("done", "verified", "cancelled")


def succeeded_is_proven(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """Succeeded only when the record proves it (belay.journal.proof): every step shown done with
    no failed verification, every deliverable a subagent owes published and not empty."""
    if b.phase != Phase.SUCCEEDED:
        return
    offered = {i.id for i in b.items if i.kind == "deliverable" and i.state == "done"}
    offered |= {r.name for r in b.ready_for_review if r.size != 0}
    for step in b.steps:
        if step.status.value not in DONE_STATUSES or step.verification_failed:
            yield f"succeeded, and step {step.task_id} is {step.status.value}"
        owes = step.deliverable if step.task_id == step.owner else None
        if owes and owes not in offered:
            yield f"succeeded, and {owes}, which {step.owner} owes, is not there"


def failed_verification_needs_attention(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A step whose verification failed is never shown done, and needs attention."""
    attention = {a.id for a in b.needs_attention}
    for step in b.steps:
        if not step.verification_failed:
            continue
        failed = f"{step.task_id}'s verification {step.verification_failed} failed"
        if step.status.value in ("done", "verified"):
            yield f"{failed}, and it is shown {step.status.value}"
        if step.task_id not in attention:
            yield f"{failed}, and nothing needs attention"


def review_is_of_real_bytes(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """Nothing empty is offered for review."""
    for review in b.ready_for_review:
        if review.size == 0:
            yield f"{review.name} is empty (sha256 {review.sha256}) and offered for review"


def needing_attention_names_what(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """A session that needs attention says what needs it, each with the command that reopens it."""
    if b.phase != Phase.NEEDS_ATTENTION:
        return
    if not b.needs_attention:
        yield "phase NeedsAttention, and nothing is listed as needing attention"
    for attention in b.needs_attention:
        if attention.kind == "unproven" and _verb(attention.command) not in ("reject", "amend"):
            yield f"{attention.id} is not proven done and names no reject or amend (`{attention.command}`)"


def decisions_are_signed(b: Briefing, rows: Sequence[Row]) -> Iterable[str]:
    """Every decision on the page says who made it and when; an approval decided waits no more."""
    waiting = {a.id for a in b.waiting_on_you if a.kind == "approval"}
    for d in b.decided:
        if not d.by or d.at is None:
            yield f"{d.kind} {d.item} (seq {d.seq}) does not say who or when"
        if d.kind == "approval" and d.item in waiting:
            yield f"approval {d.item} was decided at seq {d.seq} and still waits on you"


Law = Callable[[Briefing, Sequence[Row]], Iterable[str]]
LAWS: dict[str, Law] = {
    "one class per item": one_class,
    "every wait carries its command": wait_has_its_command,
    "an ended session runs nothing": ended_runs_nothing,
    "counts equal the lines under them": counts_match_lines,
    "rejected bytes are never ready for review": rejected_bytes_wait,
    "an interrupted attempt is not 'no attempt lost'": lost_means_lost,
    "a resume names each subagent's next step": next_per_subagent,
    "a reopened session waits for a resume": reopened_is_no_interruption,
    "succeeded means nothing needs attention": succeeded_means_done,
    "done means the deliverable exists": done_means_delivered,
    "decisions say who and when": decisions_are_signed,
    "succeeded is what the record proves": succeeded_is_proven,
    "a failed verification is never done": failed_verification_needs_attention,
    "nothing empty is ready for review": review_is_of_real_bytes,
    "needing attention names what": needing_attention_names_what,
}


def broken(b: Briefing, render: Callable[[Briefing], list[Row]] = render_rows) -> list[Broken]:
    """Every law the page breaks, with what breaks it; the page as `render` gives its rows."""
    rows = render(b)
    return [Broken(law, detail) for law, check in LAWS.items() for detail in check(b, rows)]


# The fleet and objective views


WAIT_VERBS = {
    "user": ("approve", "answer", "reconcile", "message"),
    "external": ("approve", "brief"),
    "review": ("artifacts",),
}


def fleet_broken(view: FleetView) -> list[Broken]:
    """The summary counts the rows it sums up, and each wait carries its own kind's command."""
    found = []
    rows = view.sessions
    columns = {
        "waiting_on_you": sum(bool(r.waits_on_user) for r in rows),
        "on_external": sum(bool(r.waits_on_external) for r in rows),
        "ready_for_review": sum(bool(r.ready_for_review) for r in rows),
    }
    for bucket, count in columns.items():
        if getattr(view.summary, bucket) != count:
            found.append(
                Broken(
                    "the fleet summary counts its rows",
                    f"{bucket}: the summary says {getattr(view.summary, bucket)}, {count} rows show one",
                )
            )
    for row in rows:
        for wait in row.waits:
            if wait.command and _verb(wait.command) not in WAIT_VERBS[wait.kind]:
                found.append(
                    Broken(
                        "every wait carries its command",
                        f"{row.session}: {wait.kind} {wait.what} names `{wait.command}`",
                    )
                )
    return found


def objective_broken(view: ObjectiveView) -> list[Broken]:
    """What the whole waits on names each wait's own command; the summary counts the sessions whose
    row shows a wait of each kind; once every session succeeded, only reviews are left."""
    found = []
    buckets = (("user", "waiting_on_you"), ("external", "on_external"), ("review", "ready_for_review"))
    for kind, bucket in buckets:
        shown = len({w.session for w in view.waits_on if w.kind == kind})
        if getattr(view.summary, bucket) != shown:
            found.append(
                Broken(
                    "the objective's summary counts its rows",
                    f"{bucket}: the summary says {getattr(view.summary, bucket)}, {shown} rows show one",
                )
            )
    for wait in view.waits_on:
        if wait.kind in WAIT_VERBS and wait.command and _verb(wait.command) not in WAIT_VERBS[wait.kind]:
            found.append(
                Broken(
                    "every wait carries its command",
                    f"{wait.session}: {wait.kind} {wait.what} names `{wait.command}`",
                )
            )
        if view.done and wait.kind != "review":
            found.append(
                Broken("a done objective waits on nothing", f"{wait.session} still waits on {wait.what}")
            )
    return found
