"""Event logs for the journal tests, built the way a store builds them (`build_event`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from belay.journal.events import (
    Actor,
    ApprovalRequest,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DeclaredArtifact,
    DerivedFrom,
    EffectClass,
    Event,
    EventDraft,
    Lifecycle,
    LifecycleKind,
    ModelOutput,
    Note,
    NoteKind,
    OperationOutcome,
    Payload,
    ScopeChange,
    Task,
    TaskStatus,
    ToolRequest,
    ToolResult,
    UserInput,
    Verification,
    Wait,
    WaitKind,
    build_event,
)
from belay.journal.state import operation_payload_sha256

SESSION = "parser-fix"
START = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
# Fixed "now" for the projections that ask about expiry.
NOW = START + timedelta(hours=3)


def sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


class LogBuilder:
    """Appends drafts with dense seqs, one minute apart, as a store would."""

    def __init__(self, session_id: str = SESSION, start: datetime = START) -> None:
        self.session_id = session_id
        self.start = start
        self.events: list[Event] = []

    def add(self, payload: Payload, *, parent_seq: int | None = None, actor: Actor | None = None) -> Event:
        seq = len(self.events) + 1
        draft = EventDraft(payload=payload, parent_seq=parent_seq, actor=actor or Actor())
        event = build_event(
            draft,
            seq=seq,
            session_id=self.session_id,
            created_at=self.start + timedelta(minutes=seq),
            idempotency_key=None,
        )
        self.events.append(event)
        return event


RESEARCHER = Actor(attempt=1, harness_version="0.1.0", model_id="model-a", subagent="researcher")
IMPLEMENTER = Actor(attempt=1, harness_version="0.1.0", model_id="model-a", subagent="implementer")
USER = Actor(kind="user", name="dana")

PUBLISH_ARGS = {"package": "csvkit-lite", "version": "1.4.1"}
PUBLISH_SHA = operation_payload_sha256("publish_package", PUBLISH_ARGS)
PATCH = ArtifactRef(sha256=sha("patch"), size=2048, media_type="text/x-diff", uri="file:///store/patch")
COMPAT = ArtifactRef(sha256=sha("compat"), size=512, media_type="text/markdown")


def realistic_log() -> list[Event]:
    """A session mid-flight after one harness loss: researcher and implementer subagents, a pending
    approval, a wait on CI, a patch ready for review, two hypotheses and a decision, and a scope
    change (target Python 3.11 -> 3.12) that invalidates exactly the compatibility matrix."""
    log = LogBuilder()
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=1, lease=1), actor=Actor(kind="operator"))
    log.add(
        UserInput(
            goal="Fix the CSV parser's quoted-newline bug and prepare a release",
            parts={
                "bug": "quoted fields containing newlines are split into two rows",
                "target": "Python 3.11",
                "release": "publish 1.4.1 to the internal index after review",
            },
        ),
        actor=USER,
    )
    plan = [
        ("reproduce", "Reproduce the bug with a failing test", "researcher", None),
        ("compat", "Check behaviour on the target Python", "researcher", "compat-matrix.md"),
        ("patch", "Patch the tokenizer", "implementer", "parser.patch"),
        ("publish", "Publish the release", "implementer", None),
    ]
    for task_id, title, owner, deliverable in plan:
        log.add(
            Task(
                task_id=task_id, title=title, status=TaskStatus.PLANNED, owner=owner, deliverable=deliverable
            )
        )
    log.add(Task(task_id="reproduce", status=TaskStatus.RUNNING), actor=RESEARCHER)
    req = log.add(
        ToolRequest(
            operation_id="op-test-1",
            tool="run_tests",
            arguments={"path": "tests/test_quotes.py"},
            effect=EffectClass.READ_ONLY,
            step="reproduce",
            subagent="researcher",
        ),
        actor=RESEARCHER,
    )
    log.add(
        ToolResult(
            operation_id="op-test-1",
            ok=True,
            output="1 failed: test_quoted_newline",
            result_id="repro",
            derived_from=DerivedFrom(request_version=1, request_parts=("bug",)),
        ),
        parent_seq=req.seq,
        actor=RESEARCHER,
    )
    log.add(Task(task_id="reproduce", status=TaskStatus.DONE), actor=RESEARCHER)
    log.add(
        Task(task_id="reproduce", status=TaskStatus.VERIFIED, detail="test fails on main"), actor=RESEARCHER
    )
    log.add(
        Note(
            note_id="h-escape", kind=NoteKind.HYPOTHESIS, text="the escape state machine drops the quote flag"
        ),
        actor=RESEARCHER,
    )
    log.add(
        Note(
            note_id="h-newline",
            kind=NoteKind.HYPOTHESIS,
            text="line endings are normalised before tokenizing",
        ),
        actor=RESEARCHER,
    )
    log.add(Task(task_id="compat", status=TaskStatus.RUNNING), actor=RESEARCHER)
    log.add(
        Artifact(
            name="compat-matrix.md",
            ref=COMPAT,
            subagent="researcher",
            result_id="compat-matrix",
            derived_from=DerivedFrom(request_version=1, request_parts=("target",)),
        ),
        actor=RESEARCHER,
    )
    log.add(Task(task_id="compat", status=TaskStatus.DONE), actor=RESEARCHER)
    log.add(
        Note(
            note_id="d-rfc",
            kind=NoteKind.DECISION,
            text="follow RFC 4180: a quoted field may contain newlines",
            status="accepted",
            evidence=("repro",),
        ),
        actor=USER,
    )
    log.add(Task(task_id="patch", status=TaskStatus.RUNNING), actor=IMPLEMENTER)
    log.add(ModelOutput(text="Patching the tokenizer state machine.", input_tokens=1200, output_tokens=300))
    log.add(
        Artifact(
            name="parser.patch",
            ref=PATCH,
            deliverable=True,
            subagent="implementer",
            description="tokenizer fix with a regression test",
            result_id="patch",
            derived_from=DerivedFrom(request_version=1, request_parts=("bug",), results=("repro",)),
        ),
        actor=IMPLEMENTER,
    )
    log.add(Task(task_id="patch", status=TaskStatus.DONE), actor=IMPLEMENTER)
    log.add(
        Wait(
            wait_id="review-patch",
            kind=WaitKind.READY_FOR_REVIEW,
            reason="patch ready",
            artifact="parser.patch",
        ),
        actor=IMPLEMENTER,
    )
    log.add(
        Checkpoint(
            checkpoint_id="cp-1",
            covers_seq=len(log.events),
            repository_revision="3f2a9c1",
            patch=PATCH,
            completed_steps=("reproduce", "patch"),
            next_step="publish",
            declared_artifacts=(DeclaredArtifact(name="parser.patch", sha256=PATCH.sha256, size=PATCH.size),),
            verification=Verification(command="pytest tests/test_quotes.py", status="passed", exit_code=0),
        ),
        actor=IMPLEMENTER,
    )
    push = log.add(
        ToolRequest(
            operation_id="op-push-1",
            tool="git_push",
            arguments={"branch": "fix/quoted-newline"},
            effect=EffectClass.UNSAFE,
            step="patch",
            subagent="implementer",
        ),
        actor=IMPLEMENTER,
    )
    log.add(
        Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=1, reason="PodDeleted"),
        actor=Actor(kind="operator"),
    )
    log.add(Lifecycle(kind=LifecycleKind.HARNESS_STARTED, attempt=2, lease=2), actor=Actor(kind="operator"))
    log.add(Lifecycle(kind=LifecycleKind.RESTORED, attempt=2, checkpoint_id="cp-1"))
    log.add(
        OperationOutcome(
            operation_id="op-push-1", outcome="unknown", detail="harness lost before the result"
        ),
        parent_seq=push.seq,
    )
    log.add(
        Wait(
            wait_id="reconcile-op-push-1",
            kind=WaitKind.ON_USER,
            reason="did git_push of fix/quoted-newline take effect?",
            condition="op-push-1",
        )
    )
    log.add(
        ScopeChange(
            request_version=2,
            summary="target Python 3.12 instead of 3.11",
            changed_parts={"target": "Python 3.12"},
        ),
        actor=USER,
    )
    log.add(Task(task_id="publish", status=TaskStatus.RUNNING), actor=IMPLEMENTER)
    log.add(
        ToolRequest(
            operation_id="op-publish-1",
            tool="publish_package",
            arguments=PUBLISH_ARGS,
            effect=EffectClass.UNSAFE,
            step="publish",
            subagent="implementer",
        ),
        actor=IMPLEMENTER,
    )
    log.add(
        ApprovalRequest(
            approval_id="apr-publish",
            operation_id="op-publish-1",
            tool="publish_package",
            payload_sha256=PUBLISH_SHA,
            summary="publish csvkit-lite 1.4.1 to the internal index",
            expires_at=START + timedelta(days=1),
        ),
        actor=IMPLEMENTER,
    )
    log.add(
        Wait(
            wait_id="approve-publish",
            kind=WaitKind.ON_USER,
            reason="approval apr-publish for publish_package",
        ),
        actor=IMPLEMENTER,
    )
    log.add(
        Wait(
            wait_id="ci-green",
            kind=WaitKind.ON_EXTERNAL,
            reason="CI must pass on the fix branch",
            condition="ci/fix-quoted-newline status == success",
        ),
        actor=IMPLEMENTER,
    )
    return log.events


class ReadPage(HTMLParser):
    """An HTML page as a person and a browser meet it: its readable text (outside <style>), its
    elements, its link targets, and every attribute or style that would make a browser fetch."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.tags: set[str] = set()
        self.links: list[str] = []
        self.fetches: list[str] = []
        self._in_style = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self._in_style = tag == "style"
        for name, value in attrs:
            if name in ("src", "srcset", "poster", "data") or (
                name == "href" and tag in ("link", "image", "use")
            ):
                self.fetches.append(f"{tag} {name}={value}")
            elif name == "href":
                self.links.append(value or "")

    def handle_endtag(self, tag: str) -> None:
        self._in_style = self._in_style and tag != "style"

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.chunks.append(data)
        elif "url(" in data or "@import" in data:
            self.fetches.append("a style that fetches")

    @property
    def text(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.chunks))
