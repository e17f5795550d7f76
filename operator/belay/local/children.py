"""Child sessions on one machine: what the operator does for a coordinator in a cluster, done beside
the coordinator's local attempt (`belay.local.runtime.run_local`).

When the coordinator's record starts a child (`start_session`), the child is installed in the
same home (its manifest and plan from `belay.harness.children`, its plan read next to the
coordinator's), its record is told its parent, and it runs in a harness process of its own
(`belay resume CHILD`), with its own sandboxes, beside the other children. The coordinator follows
them from the record: the store's watch (`EventStore.watch_sessions`) names the records that
moved, and a pass folds what they appended; once a child ended, its end, its deliverables (as the
coordinator's artifacts) and the end of the coordinator's wait on it are recorded in the
coordinator's record, as the operator records them. Nothing here polls a process.

A child is started once by each coordinator attempt: when it was never started, or (the first
pass of a new attempt, `belay resume COORDINATOR`) when it is interrupted, its harness gone. A
child killed while this attempt runs stays interrupted until a person resumes it (`belay resume
CHILD`) or the coordinator. A child process dies with the coordinator's (SIGTERM: it stops
cleanly, and the next attempt of the coordinator starts it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from belay.api.agentsession import AgentSession, ManifestError, parse_manifest
from belay.harness.children import (
    PART_ANNOTATION,
    CollectedRejection,
    Reopening,
    child_ended,
    child_labels,
    child_spec,
    child_wait_ended,
    collected_rejection,
    parent_link,
    reopened,
    reopened_in_parent,
)
from belay.journal.claims import rejection_claim, scope_claim
from belay.journal.events import (
    Actor,
    Artifact,
    EventDraft,
    Payload,
    ScopeChange,
    SessionLink,
    SessionLinkKind,
)
from belay.journal.phase import Phase
from belay.journal.state import EMPTY, SessionLinkRecord, SessionState, fold
from belay.lifetime import die_with_parent
from belay.local.cli_process import belay_command, belay_environment
from belay.local.liveness import holder_alive
from belay.local.runtime import LocalHome, load_installed, prepare_parsed, write_installation
from belay.stores.base import ArtifactStore, ClaimTaken, EventStore
from belay.views.fleet.model import PARENT_LABEL

log = logging.getLogger("belay.local")

RUNTIME = Actor(kind="system", name="belay children")


@dataclass
class LocalChildren:
    """The children of one coordinator's attempt: started, followed, and their ends recorded."""

    home: LocalHome
    parent: AgentSession
    store: EventStore
    artifacts: ArtifactStore
    say: Callable[[str], None] | None = None  # one line per child started, for the person
    state: SessionState = EMPTY
    child_states: dict[str, SessionState] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_round: dict[str, int] = field(default_factory=dict)  # by child: the round it was started for
    _task: asyncio.Task[None] | None = None

    @classmethod
    def follower(
        cls, home: LocalHome, say: Callable[[str], None] | None = None
    ) -> Callable[[AgentSession, EventStore, ArtifactStore], LocalChildren]:
        """What `run_local` is given to follow the children of its attempt."""
        return lambda session, store, artifacts: cls(home, session, store, artifacts, say=say)

    @property
    def parent_id(self) -> str:
        return self.parent.session_id

    def begin(self) -> None:
        """Follow the children from now on (cheap when already following)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(), name="child sessions")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for process in self.processes.values():
            process.poll()  # an ended child is reaped; one still running dies with this process

    async def _follow(self) -> None:
        from belay.journal.snapshots import load_state

        self.state = (await load_state(self.store, self.artifacts, self.parent_id)).state
        async for moved in self.store.watch_sessions():
            if moved is None or moved == self.parent_id or moved in self.state.children:
                try:
                    await self.step()
                except asyncio.CancelledError:
                    raise
                except Exception:  # the next move of a record tries again
                    log.exception("following the child sessions of %s failed", self.parent_id)

    async def step(self) -> None:
        """One pass: every child the coordinator's record started installed, told its parent,
        running, and its end recorded once it ended."""
        for process in self.processes.values():
            process.poll()  # an ended child is reaped; its round's end is in its record
        fresh = await self.store.read(self.parent_id, from_seq=self.state.last_seq + 1)
        self.state = fold(fresh, self.state)
        for name, link in sorted(self.state.children.items()):
            if link.phase:
                ended = child_wait_ended(self.state, name)
                if ended is not None:
                    await self._record(self.parent_id, f"child-wait/{name}/{ended[0]}", ended[1])
                if self.home.session_exists(name):  # ended again since (redone): its new end
                    child = await self._child_state(name)
                    if started_by(child, self.parent_id):
                        await self._collect(name, child)
                continue
            problem = self._install(link)
            if problem:
                await self._refused(link, problem)
                continue
            child = await self._child_state(name)
            told = parent_link(child, self.parent_id, link.part, link.objective)
            if told is not None:
                await self._record(name, f"parent/{self.parent_id}", [told])
            if await self._collect(name, child):
                continue
            if self.started_round.get(name) != link.round and not await self._running(name):
                self._start(name)
                self.started_round[name] = link.round

    async def _child_state(self, name: str) -> SessionState:
        known = self.child_states.get(name, EMPTY)
        fresh = await self.store.read(name, from_seq=known.last_seq + 1)
        self.child_states[name] = fold(fresh, known)
        return self.child_states[name]

    async def _collect(self, name: str, child: SessionState) -> bool:
        """The child's end recorded in the coordinator's record, when it ended and this end is not
        recorded yet: how, its deliverables collected."""
        payloads = child_ended(self.state, name, child)
        if payloads is None:
            return False
        await self._record(self.parent_id, f"child-ended/{name}/{child.last_seq}", payloads)
        return True

    def _install(self, link: SessionLinkRecord) -> str:
        """The child's entry in the home, written once; why it cannot be ('' when it is)."""
        name = link.session
        if self.home.session_exists(name):
            try:
                stored = load_installed(self.home, name)
            except ManifestError as error:
                return str(error)
            if stored.metadata.labels.get(PARENT_LABEL) != self.parent_id:
                return f"another session is called {name} in {self.home.root}"
            return ""
        parent = self.parent.to_manifest()
        manifest = {
            "apiVersion": parent["apiVersion"],
            "kind": parent["kind"],
            "metadata": {
                "name": name,
                "labels": child_labels(self.parent_id, dict(self.parent.metadata.labels), link),
                "annotations": {PART_ANNOTATION: link.part},
            },
            "spec": child_spec(
                parent["spec"], link, plan_base=str(self._plan_base()), parent_parts=self.state.request.parts
            ),
        }
        where = f"child session {name} of {self.parent_id}"
        try:
            session = parse_manifest(manifest, source=where)
            write_installation(self.home, prepare_parsed(self.home, session, self._plan_base(), where))
        except ManifestError as error:
            return str(error)
        return ""

    def _plan_base(self) -> Path:
        """Where a child's relative plan is read: next to the plan the coordinator was run with."""
        source = self.home.plan_source_file(self.parent_id)
        with contextlib.suppress(OSError):
            return Path(source.read_text()).parent
        return self.home.session_dir(self.parent_id)

    async def _refused(self, link: SessionLinkRecord, problem: str) -> None:
        """A child that cannot be installed ends Failed at once: the coordinator's wait on it ends."""
        log.error("child session %s of %s cannot start: %s", link.session, self.parent_id, problem)
        ended = SessionLink(
            kind=SessionLinkKind.CHILD, session=link.session, part=link.part, phase=Phase.FAILED.value
        )
        await self._record(self.parent_id, f"child-refused/{link.session}", [ended])

    async def _running(self, name: str) -> bool:
        """Whether the child's harness runs now (its lease holder's process exists)."""
        lease = await self.store.current_lease(name)
        return lease is not None and bool(holder_alive(lease.holder))

    def _start(self, name: str) -> None:
        """The child's harness in a process of its own, its output in its logs directory."""
        logs = self.home.logs_dir(name)
        logs.mkdir(parents=True, exist_ok=True)
        options = []
        if self.home.events_url:
            options += ["--events", self.home.events_url]
        if self.home.artifacts_url:
            options += ["--artifacts", self.home.artifacts_url]
        with (logs / "belay.log").open("ab") as output:
            self.processes[name] = subprocess.Popen(
                [*belay_command(self.home.root, *options), "resume", name, "--quiet"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=belay_environment(None),
                # Stopped cleanly when the coordinator's process ends, however it ends.
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        if self.say is not None:
            self.say(f"child session {name} started (harness process {self.processes[name].pid})")

    async def _record(self, session_id: str, key: str, payloads: list[Payload]) -> None:
        await self.store.append(
            session_id,
            [EventDraft(payload=p, actor=RUNTIME) for p in payloads],
            idempotency_key=f"children/{self.parent_id}/{key}",
        )


async def reopen_children(home: LocalHome, parent: str, by: str) -> list[Reopening]:
    """After `belay amend` of a coordinator: exactly the children whose part the latest scope
    change changed, reopened (the change of their part recorded in each one's record, under the
    claim of its next request version, and the link reopened in the coordinator's record). The
    next attempt of the coordinator (or the one running) starts them again; the others stand."""
    from belay.journal.snapshots import load_state

    store = home.open_event_store()
    artifacts = home.open_artifact_store()
    try:
        state = (await load_state(store, artifacts, parent)).state
        latest = await store.latest(parent, ScopeChange.EVENT_TYPE)
        if latest is None or not isinstance(latest.payload, ScopeChange):
            return []
        children = {name: (await load_state(store, artifacts, name)).state for name in state.children}
        found = reopened(parent, state, latest.payload, children, by)
        for reopening in found:
            version = reopening.change.request_version
            with contextlib.suppress(ClaimTaken):  # someone amended the child first: theirs stands
                await store.append(
                    reopening.child,
                    [EventDraft(payload=reopening.change, actor=Actor(kind="user", name=by))],
                    claim=scope_claim(version),
                )
            await store.append(
                parent,
                [EventDraft(payload=reopening.link, actor=RUNTIME)],
                idempotency_key=f"children/{parent}/reopen/{reopening.child}/v{state.request.version}",
            )
        return found
    finally:
        await store.close()


async def reject_collected(
    home: LocalHome, parent: str, name: str, sha256: str, reason: str, by: str
) -> CollectedRejection | int:
    """`belay reject COORDINATOR CHILD/NAME`: the child that made the collected deliverable
    reopened with the reason (a rejection of its own bytes, in its record, under that rejection's
    claim), then in the coordinator's record the rejection and the link reopened, as an amend of the
    child's part reopens it: the coordinator's next attempt (or the one running) starts the child
    again, its step that awaited the child waits for the child's next end and collects the new
    bytes. The child is told first, so a coordinator that sees the link reopened starts a child
    that has work to redo. Returns what was recorded, or the seq of the decision that stands when
    someone turned these bytes down at the coordinator first."""
    from belay.journal.snapshots import load_state

    store = home.open_event_store()
    artifacts = home.open_artifact_store()
    user = Actor(kind="user", name=by)
    try:
        state = (await load_state(store, artifacts, parent)).state
        found = collected_rejection(state, name, sha256, reason, by)
        if found is None:
            raise LookupError(f"{name} is not a deliverable {parent} collected from a child session")
        own = found.in_child
        with contextlib.suppress(ClaimTaken):  # turned down in the child already: that one stands
            await store.append(
                found.child,
                [EventDraft(payload=own, actor=user)],
                claim=rejection_claim(own.name, own.sha256),
            )
        try:
            await store.append(
                parent,
                [EventDraft(payload=p, actor=user) for p in found.in_coordinator],
                claim=rejection_claim(name, sha256),
            )
        except ClaimTaken as taken:
            return taken.seq
        return found
    finally:
        await store.close()


def started_by(child: SessionState, parent: str) -> bool:
    """Whether the session is the child `parent` started (not another session of that name)."""
    return child.parent is not None and child.parent.session == parent


async def collect_ended_children(home: LocalHome, parent: str) -> list[str]:
    """Before a coordinator's resume: each child that ended since its end was last recorded here
    (redone after a person's rejection or amend of its own) recorded again, its new bytes
    collected, as the attempt's follower would; one line per child collected."""
    from belay.journal.snapshots import load_state

    store = home.open_event_store()
    artifacts = home.open_artifact_store()
    lines = []
    try:
        state = (await load_state(store, artifacts, parent)).state
        for name in sorted(state.children):
            if not home.session_exists(name):
                continue
            child = (await load_state(store, artifacts, name)).state
            payloads = child_ended(state, name, child) if started_by(child, parent) else None
            if payloads is None:
                continue
            await store.append(
                parent,
                [EventDraft(payload=p, actor=RUNTIME) for p in payloads],
                idempotency_key=f"children/{parent}/child-ended/{name}/{child.last_seq}",
            )
            ended = payloads[0].phase if isinstance(payloads[0], SessionLink) else ""
            names = ", ".join(
                f"{a.name} (sha256 {a.ref.sha256[:12]})" for a in payloads if isinstance(a, Artifact)
            )
            lines.append(
                f"child session {name} ended {ended} since: collected {names or 'nothing it proves'}"
            )
        return lines
    finally:
        await store.close()


async def reopen_in_parent(home: LocalHome, child: str, by: str) -> str | None:
    """After a person's rejection or amend of a child session itself: in its coordinator's record,
    the child reopened (`belay.harness.children.reopened_in_parent`, which the operator writes
    too), so the coordinator collects the child's next end at its next resume. The coordinator's
    name, or None when the session has no coordinator, its end is not recorded there or the change
    reopened none of its work."""
    from belay.journal.snapshots import load_state

    store = home.open_event_store()
    artifacts = home.open_artifact_store()
    try:
        state = (await load_state(store, artifacts, child)).state
        if state.parent is None:
            return None
        parent = state.parent.session
        if not home.session_exists(parent):
            return None
        reopening = reopened_in_parent((await load_state(store, artifacts, parent)).state, child, state)
        if reopening is None:
            return None
        key, again = reopening
        await store.append(
            parent,
            [EventDraft(payload=again, actor=Actor(kind="user", name=by))],
            idempotency_key=f"children/{parent}/{key}",
        )
        return parent
    finally:
        await store.close()
