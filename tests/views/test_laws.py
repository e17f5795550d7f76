"""The laws of the page (belay.views.laws), checked at every position of a record: random sessions
built from the record's own event models (kills, waits, approvals, amends, rejections, failed
tools, delegations), the unshaped random logs of the fold's property tests, and the records the
repository keeps as examples. A broken law is reported with the seq it broke at. Each law is shown
able to fail on a page broken on purpose."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from belay.harness.children import collected_rejection
from belay.journal.events import (
    Actor,
    Approval,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    EffectClass,
    Event,
    Lifecycle,
    LifecycleKind,
    OperationOutcome,
    Payload,
    Rejection,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    UserMessage,
    Verification,
    Wait,
    WaitKind,
)
from belay.journal.phase import Liveness, Phase
from belay.journal.state import EMPTY, SessionState, apply
from belay.views.briefing.build import briefing
from belay.views.briefing.model import (
    ActionItem,
    Briefing,
    DecisionItem,
    ExternalItem,
    OpenItem,
    ReviewItem,
    RunningItem,
    StepItem,
)
from belay.views.briefing.render import render_rows, render_text
from belay.views.fleet.build import fleet_row, fleet_view, objective_view
from belay.views.fleet.model import FleetSummary, FleetWait, ObjectiveWait
from belay.views.laws import LAWS, broken, fleet_broken, objective_broken
from belay.views.status.build import session_status
from tests.fleet_records import EXPECTED, HARNESS, _history
from tests.journal.fixtures import USER, LogBuilder, realistic_log, sha
from tests.journal.strategies import logs

SUBAGENTS = ("fixer", "ci", "research")
SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Story:
    """A session told move by move, each move the events a harness or a person records for it."""

    def __init__(self) -> None:
        self.log = LogBuilder(session_id="laws")
        self.attempt = 0
        self.calls = 0
        self.waits: list[tuple[str, str]] = []  # (wait id, operation id) still open
        self.approvals: list[str] = []
        self.published: dict[str, str] = {}  # name -> sha256
        self.version = 1
        self.add(UserInput(goal="fix the parser", parts={"bug": "quoted newlines"}), actor=USER)
        self.turn_ends: dict[str, str] = {}  # subagent -> the wait its turn's end opened
        for sub in SUBAGENTS:
            self.add(
                Task(task_id=sub, title=sub, status=TaskStatus.PLANNED, owner=sub, deliverable=f"{sub}.md")
            )
            for step in ("one", "two"):
                self.add(Task(task_id=f"{sub}/{step}", title=step, status=TaskStatus.PLANNED, owner=sub))

    def add(self, payload: Payload, actor: Actor | None = None) -> None:
        self.log.add(payload, actor=actor or Actor(kind="harness", attempt=max(1, self.attempt)))

    def op(
        self, sub: str, tool: str, effect: EffectClass = EffectClass.IDEMPOTENT, **arguments: object
    ) -> str:
        self.calls += 1
        op = f"{sub}.{tool}.{self.calls}"
        self.add(
            ToolRequest(operation_id=op, tool=tool, arguments=dict(arguments), effect=effect, subagent=sub)
        )
        return op

    def move(self, name: str, sub: str, flag: bool) -> None:
        getattr(self, name)(sub, flag)

    # The moves
    def start(self, sub: str, flag: bool) -> None:
        self.attempt += 1
        self.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=self.attempt, lease=self.attempt))

    def kill(self, sub: str, flag: bool) -> None:
        if self.attempt:
            kind = LifecycleKind.HARNESS_LOST if flag else LifecycleKind.HARNESS_FINISHED
            self.add(Lifecycle(kind=kind, attempt=self.attempt), actor=Actor(kind="operator"))

    def step(self, sub: str, flag: bool) -> None:
        status = TaskStatus.RUNNING if flag else TaskStatus.VERIFIED
        self.add(Task(task_id=f"{sub}/{'one' if flag else 'two'}", status=status, owner=sub))

    def checkpoint(self, sub: str, flag: bool) -> None:
        self.add(
            Checkpoint(
                checkpoint_id=f"cp-{sub}-{self.calls}",
                covers_seq=len(self.log.events),
                subagent=sub,
                next_step="two" if flag else "(end of plan)",
                verification=Verification(command="make check", status="passed"),
            )
        )

    def tool(self, sub: str, flag: bool) -> None:
        op = self.op(sub, "run_command", command="make")
        self.add(ToolResult(operation_id=op, ok=flag, error=None if flag else "exit 2"))

    def open_call(self, sub: str, flag: bool) -> None:
        self.op(
            sub,
            "create_ticket" if flag else "run_command",
            EffectClass.UNSAFE if flag else EffectClass.IDEMPOTENT,
        )

    def lost_effect(self, sub: str, flag: bool) -> None:
        op = self.op(sub, "create_ticket", EffectClass.UNSAFE, title="t")
        self.add(OperationOutcome(operation_id=op, outcome="unknown", detail="harness lost"))
        if flag:
            reason = f"did create_ticket {op} take effect?"
            self.add(Wait(wait_id=f"reconcile-{op}", kind=WaitKind.ON_USER, reason=reason, condition=op))
            self.waits.append((f"reconcile-{op}", op))

    def wait(self, sub: str, flag: bool) -> None:
        tool = "wait_on_external" if flag else "wait_on_user"
        op = self.op(sub, tool, reason="CI must be green")
        kind = WaitKind.ON_EXTERNAL if flag else WaitKind.ON_USER
        self.add(
            Wait(
                wait_id=f"wait-{op}",
                kind=kind,
                reason="CI must be green",
                condition="ci-green" if flag else None,
            )
        )
        self.waits.append((f"wait-{op}", op))

    def answer(self, sub: str, flag: bool) -> None:
        if not self.waits:
            return
        wait_id, op = self.waits.pop(0)
        state = self.state()
        record = state.waits[wait_id]
        said = f"{record.reason} -> {'yes' if flag else 'no'} (dana) looks right"
        if wait_id.startswith("reconcile-"):
            self.add(
                OperationOutcome(operation_id=op, outcome="reconciled", succeeded=flag, by="dana"),
                actor=Actor(kind="user", name="dana"),
            )
        kind, condition = record.kind, record.condition
        self.add(
            Wait(wait_id=wait_id, kind=kind, reason=said, resolved=True, condition=condition),
            actor=Actor(kind="user", name="dana"),
        )
        if not wait_id.startswith("reconcile-"):
            self.add(ToolResult(operation_id=op, ok=True))

    def stop_short(self, sub: str, flag: bool) -> None:
        """The subagent's turn ends without its deliverable (flag: the record also calls it done,
        as a harness that took a turn's end for the subagent's end did)."""
        if sub in self.turn_ends:
            return
        wait_id = f"turn-ended-{sub}.{self.calls}"
        harness = Actor(kind="harness", attempt=max(1, self.attempt), subagent=sub)
        reason = f'{sub} ended its turn without {sub}.md, which it owes; `belay message laws "..."` ...'
        self.log.add(
            Wait(wait_id=wait_id, kind=WaitKind.ON_USER, reason=reason, owed=f"{sub}.md"), actor=harness
        )
        status = TaskStatus.DONE if flag else TaskStatus.BLOCKED
        self.log.add(Task(task_id=sub, status=status, owner=sub), actor=harness)
        self.turn_ends[sub] = wait_id

    def message(self, sub: str, flag: bool) -> None:
        """A person's message to the subagent (flag), or a no: the session ends without it."""
        wait_id = self.turn_ends.pop(sub, None)
        if wait_id is None:
            return
        dana = Actor(kind="user", name="dana")
        record = self.state().waits[wait_id]
        if flag:
            self.add(UserMessage(subagent=sub, wait_id=wait_id, text="publish it", by="dana"), actor=dana)
        said = f"{record.reason} -> {'message' if flag else 'no'} (dana) publish it"
        self.add(
            Wait(wait_id=wait_id, kind=record.kind, reason=said, resolved=True, owed=record.owed), actor=dana
        )
        if flag:
            self.add(Task(task_id=sub, status=TaskStatus.RUNNING, owner=sub))
        else:
            self.add(Lifecycle(kind=LifecycleKind.SESSION_FAILED, attempt=max(1, self.attempt)))

    def ask_approval(self, sub: str, flag: bool) -> None:
        op = self.op(sub, "publish_deliverable", path="notes.md")
        approval = f"approve-{op}"
        self.add(
            ApprovalRequest(
                approval_id=approval,
                operation_id=op,
                tool="publish_deliverable",
                payload_sha256=sha(op),
                summary=f"{sub} publishes notes.md",
            )
        )
        self.approvals.append(approval)

    def decide(self, sub: str, flag: bool) -> None:
        if not self.approvals:
            return
        approval = self.approvals.pop(0)
        op = approval.removeprefix("approve-")
        self.add(
            Approval(
                approval_id=approval,
                operation_id=op,
                payload_sha256=sha(op),
                granted=flag,
                by="dana",
                reason="looks right" if flag else "not this",
            ),
            actor=Actor(kind="user", name="dana"),
        )
        if flag:
            self.add(ToolResult(operation_id=op, ok=True))

    def publish(self, sub: str, flag: bool) -> None:
        name = f"{sub}.md"
        # flag: the same bytes again (after a rejection, republished unchanged)
        digest = self.published.get(name) if flag and name in self.published else sha(f"{name}{self.calls}")
        op = self.op(sub, "publish_deliverable", path=name)
        ref = ArtifactRef(sha256=digest, size=10)
        self.add(Artifact(name=name, ref=ref, deliverable=True, subagent=sub, result_id=f"r-{op}"))
        self.add(
            Wait(wait_id=f"review-{name}", kind=WaitKind.READY_FOR_REVIEW, reason="ready", artifact=name)
        )
        self.add(ToolResult(operation_id=op, ok=True, result_id=f"r-{op}"))
        self.published[name] = digest

    def finish(self, sub: str, flag: bool) -> None:
        """The subagent's two steps done and checkpointed, the second publishing its deliverable,
        then the subagent done (flag: both verifications passed; else the second one failed, as a
        `test -s` on an empty file does, and the deliverable is empty)."""
        for step in ("one", "two"):
            task_id = f"{sub}/{step}"
            self.add(Task(task_id=task_id, status=TaskStatus.RUNNING, owner=sub))
            passed = flag or step == "one"
            if step == "two":
                name = f"{sub}.md"
                self.calls += 1
                op = f"{sub}.two.{self.calls}"
                request = ToolRequest(
                    operation_id=op,
                    tool="publish_deliverable",
                    arguments={"path": name},
                    effect=EffectClass.IDEMPOTENT,
                    subagent=sub,
                    step=task_id,
                )
                self.add(request)
                digest = sha(f"{name}{self.calls}") if passed else sha("")
                ref = ArtifactRef(sha256=digest, size=10 if passed else 0)
                self.add(Artifact(name=name, ref=ref, deliverable=True, subagent=sub, result_id=op))
                self.add(
                    Wait(
                        wait_id=f"review-{name}",
                        kind=WaitKind.READY_FOR_REVIEW,
                        reason="ready",
                        artifact=name,
                    )
                )
                self.add(ToolResult(operation_id=op, ok=True, result_id=op))
                self.published[name] = digest
            status = TaskStatus.VERIFIED if passed else TaskStatus.DONE
            self.add(Task(task_id=task_id, status=status, owner=sub))
            verification = Verification(
                command=f"test -s {sub}.md",
                status="passed" if passed else "failed",
                exit_code=0 if passed else 1,
            )
            self.add(
                Checkpoint(
                    checkpoint_id=task_id,
                    covers_seq=len(self.log.events),
                    subagent=sub,
                    verification=verification,
                )
            )
        self.add(Task(task_id=sub, status=TaskStatus.DONE, owner=sub))

    def reject(self, sub: str, flag: bool) -> None:
        name = f"{sub}.md"
        if name in self.published:
            self.add(
                Rejection(name=name, sha256=self.published[name], reason="wrong section", by="dana"),
                actor=Actor(kind="user", name="dana"),
            )

    def amend(self, sub: str, flag: bool) -> None:
        self.version += 1
        self.add(
            ScopeChange(
                request_version=self.version, summary="also CRLF", changed_parts={"bug": f"v{self.version}"}
            ),
            actor=Actor(kind="user", name="dana"),
        )

    def delegate(self, sub: str, flag: bool) -> None:
        op = self.op(sub, "start_session", name="child-a", part="docs", goal="g")
        self.add(ToolResult(operation_id=op, ok=flag, error=None if flag else "no operator"))

    def collect(self, sub: str, flag: bool) -> None:
        """The child session child-a ended (flag: succeeded) with its note: the coordinator's record
        holds its end and the note as its own artifact, as `belay.harness.children` writes them."""
        self.calls += 1
        digest = sha(f"docs.md{self.calls}")
        phase = "Succeeded" if flag else "Failed"
        children = Actor(kind="system", name="belay children")
        link = SessionLink(
            kind=SessionLinkKind.CHILD,
            session="child-a",
            part="docs",
            phase=phase,
            deliverables={"docs.md": digest},
        )
        self.add(link, actor=children)
        note = Artifact(
            name="child-a/docs.md",
            ref=ArtifactRef(sha256=digest, size=10),
            deliverable=True,
            subagent=sub,
            description="docs.md, the deliverable of child session child-a (docs)",
        )
        self.add(note, actor=children)

    def reopen_child(self, sub: str, flag: bool) -> None:
        """The child's part changed (an amend of the coordinator): how it ended no longer stands."""
        self.add(
            SessionLink(kind=SessionLinkKind.CHILD, session="child-a", part="docs", reopened=True),
            actor=Actor(kind="user", name="dana"),
        )

    def reject_collected(self, sub: str, flag: bool) -> None:
        """A person turned the collected note down at the coordinator (flag: with a reason): the
        events `belay.harness.children.collected_rejection` gives for the coordinator's record."""
        state = self.state()
        note = state.artifacts.get("child-a/docs.md")
        reason = "name the versions" if flag else "no"
        found = note and collected_rejection(state, note.name, note.ref.sha256, reason, "dana")
        for payload in found.in_coordinator if found else ():
            self.add(payload, actor=Actor(kind="user", name="dana"))

    def end(self, sub: str, flag: bool) -> None:
        kind = LifecycleKind.SESSION_COMPLETED if flag else LifecycleKind.SESSION_FAILED
        self.add(Lifecycle(kind=kind, attempt=max(1, self.attempt), detail="every subtask done"))
        self.add(Lifecycle(kind=LifecycleKind.HARNESS_FINISHED, attempt=max(1, self.attempt)))

    def state(self) -> SessionState:
        state = EMPTY
        for event in self.log.events:
            state = apply(state, event)
        return state


MOVES = [
    name for name in vars(Story) if not name.startswith("_") and name not in ("add", "op", "move", "state")
]
moves = st.lists(
    st.tuples(st.sampled_from(MOVES), st.sampled_from(SUBAGENTS), st.booleans()), min_size=1, max_size=18
)


def _livenesses(state: SessionState, event: Event) -> Iterator[Liveness | None]:
    """The record alone; an attempt alive; the attempt gone (killed), at the event's time."""
    yield None
    now = event.created_at + timedelta(seconds=1)
    lease = max(1, state.lifecycle.lease or state.lifecycle.attempt)
    yield Liveness(
        now=now, lease=lease, holder="pid 1", renewed_lease=lease, renewed_at=now, holder_alive=True
    )
    yield Liveness(now=now, lease=lease, holder="pid 1", holder_alive=False)


def laws_broken_at_every_prefix(events: list[Event], build: Callable[..., Briefing] = briefing) -> list[str]:
    """Every law broken at every position of the record, each named with its seq."""
    found = []
    state = EMPTY
    for event in events:
        state = apply(state, event)
        for liveness in _livenesses(state, event):
            page = build(state, liveness=liveness)
            problems = broken(page)
            row = fleet_row(
                state.session_id,
                session_status(state, liveness=liveness),
                now=event.created_at,
                labels={"belay.dev/objective": "laws"},
            )
            problems += fleet_broken(fleet_view([row])) + objective_broken(objective_view("laws", [row]))
            found += [f"seq {event.seq}: {problem}" for problem in problems]
    return found


@SETTINGS
@given(story=moves)
def test_every_law_holds_at_every_position_of_a_random_session(story: list[tuple[str, str, bool]]) -> None:
    told = Story()
    for name, sub, flag in story:
        told.move(name, sub, flag)
    assert laws_broken_at_every_prefix(told.log.events) == []


@settings(max_examples=25, derandomize=True, deadline=None, database=None)
@given(events=logs(max_size=25))
def test_every_law_holds_at_every_position_of_an_unshaped_log(events: list[Event]) -> None:
    assert laws_broken_at_every_prefix(events) == []


def _fleet_record(name: str) -> list[Event]:
    log = LogBuilder(session_id=name)
    report = Artifact(
        name="report.md",
        ref=ArtifactRef(sha256=sha("report"), size=33, media_type="text/markdown"),
        deliverable=True,
        subagent="worker",
        description="the report",
    )
    history = _history(name, report)
    log.add(history[0], actor=Actor(kind="user", name="test"))
    for payload in history[1:]:
        log.add(payload, actor=HARNESS)
    return log.events


@pytest.mark.parametrize("record", ["realistic", *EXPECTED])
def test_every_law_holds_at_every_position_of_the_example_records(record: str) -> None:
    events = realistic_log() if record == "realistic" else _fleet_record(record)
    assert laws_broken_at_every_prefix(events) == []


def test_a_session_waiting_on_you_and_on_ci_lists_each_once_with_its_command_and_then_who_decided() -> None:
    told = Story()
    told.start("fixer", True)
    told.step("ci", True)
    told.wait("ci", True)  # CI must be green
    told.ask_approval("fixer", True)
    page = briefing(told.state())
    assert [r.id for r in page.running] == ["ci/one"]
    [external] = page.waiting_on_external
    assert external.command == f"belay approve laws {external.wait_id}"
    [approval] = page.waiting_on_you
    assert approval.kind == "approval" and approval.command.startswith("belay approve laws approve-")
    row = fleet_row("laws", session_status(told.state()), now=told.log.events[-1].created_at)
    summary = fleet_view([row]).summary
    assert (summary.waiting_on_you, summary.on_external) == (1, 1)
    told.decide("fixer", True)
    told.answer("ci", True)
    page = briefing(told.state())
    assert page.waiting_on_you == [] and page.waiting_on_external == []
    assert [(d.kind, d.outcome, d.by, d.reason) for d in page.decided] == [
        ("approval", "granted", "dana", "looks right"),
        ("answer", "yes", "dana", "looks right"),
    ]
    assert all(d.at is not None for d in page.decided)


def _collected_reviews(page: Briefing) -> list[ReviewItem]:
    """What waits on your review of the bytes collected from child-a (the coordinator's own
    subagents published theirs too)."""
    return [r for r in page.ready_for_review if r.name.startswith("child-a/")]


def test_a_coordinators_collected_deliverable_is_ready_for_review_while_its_childs_end_stands() -> None:
    told = Story()
    told.start("fixer", True)
    told.delegate("fixer", True)
    assert briefing(told.state()).ready_for_review == []  # nothing collected before the child ends
    told.collect("fixer", True)
    for sub in SUBAGENTS:
        told.finish(sub, True)
    told.end("fixer", True)
    page = briefing(told.state())
    assert page.phase == Phase.SUCCEEDED
    [review] = _collected_reviews(page)
    assert (review.name, review.command, review.alternative) == (
        "child-a/docs.md",
        "belay artifacts get laws child-a/docs.md -o child-a/docs.md",
        'belay reject laws child-a/docs.md --reason "..."',
    )
    assert review.description == "docs.md, the deliverable of child session child-a (docs)"
    first = told.state().artifacts["child-a/docs.md"].ref.sha256
    assert review.sha256 == first
    status = session_status(told.state())
    collected = [(d.name, d.ready_for_review) for d in status.deliverables if d.name.startswith("child-a/")]
    assert collected == [("child-a/docs.md", True)]
    [condition] = [c for c in status.conditions if c.type == "ReadyForReview"]
    assert (condition.status, condition.message) == (
        "True",
        "ready for review: fixer.md, ci.md, research.md, child-a/docs.md",
    )

    told.reopen_child("fixer", True)  # its part changed: what it delivered no longer stands
    page = briefing(told.state())
    assert _collected_reviews(page) == []
    [item] = [i for i in page.items if i.kind == "deliverable" and i.id.startswith("child-a/")]
    assert item.state == "invalid" and "child session child-a runs again (round 2)" in item.summary
    [collected_status] = [d for d in session_status(told.state()).deliverables if d.name == "child-a/docs.md"]
    assert not collected_status.ready_for_review

    told.collect("fixer", True)  # it ended again, with new bytes
    [review] = _collected_reviews(briefing(told.state()))
    second = told.state().artifacts["child-a/docs.md"].ref.sha256
    assert review.sha256 == second != first

    told.reject_collected("fixer", True)  # turned down at the coordinator: the child runs again
    page = briefing(told.state())
    assert _collected_reviews(page) == []
    [item] = [i for i in page.items if i.kind == "deliverable" and i.id.startswith("child-a/")]
    assert item.state == "invalid", item
    assert (
        item.summary
        == "rejected by dana: name the versions; child session child-a runs again (round 3) with the reason"
    )
    [rejection] = page.rejections
    assert (rejection.item, rejection.sha256, rejection.child) == ("child-a/docs.md", second, "child-a")
    assert "reopened child session child-a: it runs again with the reason" in render_text(page)


def test_a_turn_that_ends_without_the_deliverable_waits_on_you_and_is_never_done() -> None:
    told = Story()
    told.start("fixer", True)
    told.step("fixer", True)
    told.stop_short("fixer", True)  # the record even calls the subagent done
    alive = Liveness(
        now=told.log.events[-1].created_at,
        lease=1,
        holder="pid 1",
        renewed_lease=1,
        renewed_at=told.log.events[-1].created_at,
        holder_alive=True,
    )
    page = briefing(told.state(), liveness=alive)
    assert page.phase == Phase.WAITING_ON_USER and page.interruption is None
    [waiting] = page.waiting_on_you
    assert waiting.kind == "message" and waiting.id == told.turn_ends["fixer"]
    assert waiting.summary == "fixer ended its turn without fixer.md, which it owes"
    assert (waiting.command, waiting.also, waiting.alternative) == (
        'belay message laws "..."',
        'belay amend laws --goal "..."',
        f'belay reject laws {waiting.id} --reason "..."',
    )
    [fixer] = [s for s in page.steps if s.task_id == "fixer"]
    assert (fixer.status, fixer.missing) == (TaskStatus.BLOCKED, "fixer.md")
    assert "fixer/one" not in [r.id for r in page.running]  # its turn ended: nothing of it runs
    assert broken(page) == []
    told.message("fixer", True)
    page = briefing(told.state(), liveness=alive)
    assert page.waiting_on_you == []
    assert [(d.kind, d.outcome, d.by, d.reason) for d in page.decided] == [
        ("answer", "message", "dana", "publish it")
    ]


# ---- each law shown able to fail: a page broken on purpose, and the checker names the law


def _told(*story: tuple[str, str, bool]) -> Story:
    told = Story()
    for name, sub, flag in story:
        told.move(name, sub, flag)
    return told


def _page(*story: tuple[str, str, bool], liveness: Liveness | None = None, **fields: object) -> Briefing:
    page = briefing(_told(*story).state(), liveness=liveness)
    assert broken(page) == []  # right as built
    return page.model_copy(update=fields)


def _gone(told: Story) -> Liveness:
    return Liveness(now=told.log.events[-1].created_at, lease=1, holder="pid 1", holder_alive=False)


STARTED = ("start", "fixer", True)
RUNNING = RunningItem(kind="task", id="fixer/one", description="one")


def _reviewed_again() -> Briefing:
    """The rejected bytes published again unchanged: they wait on the person; broken, they are
    offered for review again."""
    page = _page(STARTED, ("publish", "fixer", False), ("reject", "fixer", True), ("publish", "fixer", True))
    [rejection] = page.rejections
    assert not page.ready_for_review
    assert any("same bytes as rejected" in a.summary for a in page.needs_attention), page.needs_attention
    again = ReviewItem(
        name=rejection.item,
        sha256=rejection.sha256,
        command=f"belay artifacts get {page.session_id} {rejection.item}",
        alternative=f"belay reject {page.session_id} {rejection.item}",
    )
    return page.model_copy(update={"ready_for_review": [again]})


def _interrupted(**fields: object) -> Briefing:
    told = _told(STARTED, ("step", "fixer", True), ("step", "ci", True))
    page = briefing(told.state(), liveness=_gone(told))
    assert page.interruption is not None and {p.subagent for p in page.interruption.resumes} == set(SUBAGENTS)
    return page.model_copy(update=fields)


# Every subagent finished, fixer's publishing step with its verification failed, then the run ended.
UNPROVEN_END = (
    STARTED,
    ("finish", "fixer", False),
    ("finish", "ci", True),
    ("finish", "research", True),
    ("end", "fixer", True),
)


def _verification_failed(*, done: bool = False, empty_review: bool = False) -> Briefing:
    page = _page(STARTED, ("finish", "fixer", False))
    [step] = [s for s in page.steps if s.task_id == "fixer/two"]
    assert step.verification_failed and step.status == TaskStatus.FAILED
    if done:
        steps = [s.model_copy(update={"status": TaskStatus.DONE}) if s is step else s for s in page.steps]
        return page.model_copy(update={"steps": steps})
    assert empty_review and "fixer.md" not in {r.name for r in page.ready_for_review}
    empty = ReviewItem(
        name="fixer.md",
        sha256=sha(""),
        size=0,
        command="belay artifacts get laws fixer.md -o fixer.md",
        alternative='belay reject laws fixer.md --reason "..."',
    )
    return page.model_copy(update={"ready_for_review": [*page.ready_for_review, empty]})


def _said(rows: list[tuple[int, str]], *extra: tuple[int, str]) -> list[tuple[int, str]]:
    return [*rows, *extra]


WRONG = {
    "one class per item": lambda: (
        _page(
            STARTED,
            items=[OpenItem(kind="step", id="fixer/one", state="running")],
            running=[RUNNING],
            waiting_on_you=[
                ActionItem(kind="decision", id="fixer/one", summary="?", command="belay answer x y")
            ],
        ),
        render_rows,
    ),
    "every wait carries its command": lambda: (
        _page(
            STARTED,
            items=[OpenItem(kind="wait", id="w", state="waiting_on_external")],
            waiting_on_external=[ExternalItem(wait_id="w", reason="CI", condition="ci-green")],
        ),
        render_rows,
    ),
    "an ended session runs nothing": lambda: (
        _page(
            STARTED,
            phase=Phase.FAILED,
            items=[OpenItem(kind="step", id="fixer/one", state="running")],
            running=[RUNNING],
        ),
        render_rows,
    ),
    "counts equal the lines under them": lambda: (
        _page(STARTED),
        lambda b: _said(
            render_rows(b), (2, "made invalid (3 steps and outputs, of 5 results):"), (3, "fixer/one")
        ),
    ),
    "rejected bytes are never ready for review": lambda: (_reviewed_again(), render_rows),
    "an interrupted attempt is not 'no attempt lost'": lambda: (
        _interrupted(),
        lambda b: _said(render_rows(b), (1, "attempt 1; no attempt lost, no sandbox replaced")),
    ),
    "a resume names each subagent's next step": lambda: (
        _interrupted(interruption=_interrupted().interruption.model_copy(update={"resumes": []})),  # type: ignore[union-attr]
        render_rows,
    ),
    "a reopened session waits for a resume": lambda: (
        _interrupted(
            phase=Phase.INTERRUPTED,
            interruption=_interrupted().interruption.model_copy(  # type: ignore[union-attr]
                update={
                    "why": "the session ended and was reopened (request v2 (dana): also CRLF)",
                    "resumes": [],
                }
            ),
            steps=[],
        ),
        render_rows,
    ),
    "succeeded means nothing needs attention": lambda: (
        _page(
            STARTED,
            phase=Phase.SUCCEEDED,
            items=[OpenItem(kind="operation", id="op", state="needs_attention")],
        ),
        render_rows,
    ),
    "done means the deliverable exists": lambda: (
        _page(
            STARTED,
            steps=[
                StepItem(
                    task_id="fixer",
                    title="fixer",
                    owner="fixer",
                    status=TaskStatus.DONE,
                    verified=False,
                    deliverable="fixer.md",
                )
            ],
        ),
        render_rows,
    ),
    "succeeded is what the record proves": lambda: (_page(STARTED, phase=Phase.SUCCEEDED), render_rows),
    "a failed verification is never done": lambda: (_verification_failed(done=True), render_rows),
    "nothing empty is ready for review": lambda: (_verification_failed(empty_review=True), render_rows),
    "needing attention names what": lambda: (_page(*UNPROVEN_END, needs_attention=[]), render_rows),
    "decisions say who and when": lambda: (
        _page(STARTED, decided=[DecisionItem(seq=3, kind="approval", item="approve-x", outcome="granted")]),
        render_rows,
    ),
}


def test_every_law_has_a_page_that_breaks_it() -> None:
    assert sorted(WRONG) == sorted(LAWS)


@pytest.mark.parametrize("law", sorted(WRONG))
def test_each_law_is_able_to_fail(law: str) -> None:
    page, render = WRONG[law]()
    assert law in {b.law for b in broken(page, render)}


def test_a_broken_law_is_reported_with_its_seq() -> None:
    told = _told(STARTED, ("step", "fixer", True))

    def forgets_what_runs(state: SessionState, liveness: Liveness | None = None) -> Briefing:
        return briefing(state, liveness=liveness).model_copy(update={"running": []})

    found = laws_broken_at_every_prefix(told.log.events, forgets_what_runs)
    assert found and found[0].startswith("seq 12: one class per item: section running lists []")


def test_the_fleet_and_objective_laws_are_able_to_fail() -> None:
    told = _told(STARTED, ("wait", "ci", True), ("ask_approval", "fixer", True))
    row = fleet_row(
        "laws",
        session_status(told.state()),
        now=told.log.events[-1].created_at,
        labels={"belay.dev/objective": "o"},
    )
    view = fleet_view([row])
    assert fleet_broken(view) == []
    miscounted = view.model_copy(update={"summary": FleetSummary(sessions=1, waiting_on_you=1, line="")})
    assert {b.law for b in fleet_broken(miscounted)} == {"the fleet summary counts its rows"}
    one_command = row.model_copy(
        update={
            "waits": [
                FleetWait(
                    kind="external", what="ci-green", command="belay reconcile laws x --succeeded|--failed"
                )
            ]
        }
    )
    assert "every wait carries its command" in {b.law for b in fleet_broken(fleet_view([one_command]))}
    objective = objective_view("o", [row])
    assert objective_broken(objective) == []
    done = objective.model_copy(update={"done": True})
    assert {b.law for b in objective_broken(done)} == {"a done objective waits on nothing"}
    review_command = objective.model_copy(
        update={
            "waits_on": [ObjectiveWait(session="laws", kind="review", what="r.md", command=row.command)],
            "summary": FleetSummary(sessions=1, ready_for_review=1, line=""),
        }
    )
    assert {b.law for b in objective_broken(review_command)} == {"every wait carries its command"}
    overcounted_summary = view.summary.model_copy(update={"waiting_on_you": 2})
    overcounted = objective.model_copy(update={"summary": overcounted_summary})
    assert {b.law for b in objective_broken(overcounted)} == {"the objective's summary counts its rows"}


def test_a_run_that_ended_without_proving_its_work_needs_attention_on_every_view() -> None:
    told = _told(*UNPROVEN_END)
    state = told.state()
    page = briefing(state)
    assert page.phase == Phase.NEEDS_ATTENTION and broken(page) == []
    unproven = {a.id: a for a in page.needs_attention if a.kind == "unproven"}
    assert unproven["fixer/two"].summary == (
        "step fixer/two: its verification `test -s fixer.md` (exit 1) failed"
    )
    assert unproven["fixer.md"].command == 'belay reject laws fixer.md --reason "..."'
    assert "fixer.md" not in {r.name for r in page.ready_for_review}
    assert {r.name for r in page.ready_for_review} == {"ci.md", "research.md"}
    status = session_status(state)
    assert status.phase == Phase.NEEDS_ATTENTION and status.waiting_on.startswith("attention: ")
    row = fleet_row("laws", status, now=told.log.events[-1].created_at, labels={"belay.dev/objective": "o"})
    assert (row.bucket, row.command) == ("needs_attention", "belay brief laws")
    assert fleet_view([row]).summary.needs_attention == 1
    objective = objective_view("o", [row])
    assert not objective.done and objective_broken(objective) == []
    assert [(w.kind, w.command) for w in objective.waits_on if w.kind != "review"] == [
        ("needs_attention", "belay brief laws")
    ]
