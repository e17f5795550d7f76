"""The embedded runtime: a whole session on one machine, no cluster.

Home layout (`--home`, `BELAY_HOME`, default `./.belay`):

    <home>/events.db                  the session record (SQLite), every session
    <home>/artifacts/                 content-addressed artifact store
    <home>/sessions/<id>/session.yaml the manifest as run (plan path made absolute)
    <home>/sessions/<id>/plan.yaml    the scripted plan as run
    <home>/sessions/<id>/sandboxes/   one directory per subagent sandbox (workspaces, logs)
    <home>/sessions/<id>/tickets.json the local ticket service's state
    <home>/sessions/<id>/logs/harness.log  one line per event the harness recorded
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from belay.api.agentsession import AgentSession, ManifestError, SubagentSpec, load_manifest
from belay.executors import executor_factory_for
from belay.executors.self_hosted import initial_model_id
from belay.harness.attempt import HarnessResult, fault_key
from belay.harness.declared import input_files
from belay.harness.loop import Harness
from belay.journal.events import Actor, Event, EventDraft, UserInput
from belay.journal.state import SessionState
from belay.local.liveness import GuardedSandboxProvider, this_holder
from belay.stores.base import ArtifactStore, EventStore

DEFAULT_HOME = ".belay"
HOME_ENV = "BELAY_HOME"


@dataclass(frozen=True)
class LocalHome:
    root: Path

    @classmethod
    def resolve(cls, home: str | Path | None) -> LocalHome:
        return cls(Path(home or os.environ.get(HOME_ENV) or DEFAULT_HOME).absolute())

    @property
    def events_db(self) -> Path:
        return self.root / "events.db"

    @property
    def artifacts_dir(self) -> Path:
        return self.root / "artifacts"

    def session_dir(self, session_id: str) -> Path:
        return self.root / "sessions" / session_id

    def manifest_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "session.yaml"

    def plan_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "plan.yaml"

    def sandboxes_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "sandboxes"

    def tickets_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "tickets.json"

    def logs_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "logs"

    def open_event_store(self) -> EventStore:
        from belay.stores.sqlite import SqliteEventStore

        self.root.mkdir(parents=True, exist_ok=True)
        return SqliteEventStore(self.events_db)

    def open_artifact_store(self) -> ArtifactStore:
        from belay.stores.filesystem import FilesystemArtifactStore

        return FilesystemArtifactStore(self.artifacts_dir)

    def session_exists(self, session_id: str) -> bool:
        return self.manifest_file(session_id).is_file()


class LocalSandboxProvider:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir

    async def start(self, subagent: SubagentSpec, replacing: Any = None) -> Any:
        """A fresh server and workspace; a lost one (`replacing`) was already stopped."""
        from belay.sandbox.local import LocalSandbox

        return await LocalSandbox.start(
            self.base_dir,
            subagent.name,
            subagent.network_profile,
            isolation_level=subagent.isolation,
            allowlist=subagent.allowlist,
        )


class LocalTickets:
    """The harness's view of the local ticket service (create is unsafe; find is the probe)."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def create(self, title: str, body: str, client_ref: str) -> dict[str, Any]:
        from belay.local.tickets import create_ticket

        ticket = await create_ticket(self.url, title, body, client_ref=client_ref)
        return ticket.model_dump(mode="json")

    async def find(self, client_ref: str) -> list[dict[str, Any]]:
        from belay.local.tickets import find_tickets

        return [t.model_dump(mode="json") for t in await find_tickets(self.url, client_ref)]


def install_session(home: LocalHome, manifest_path: Path) -> AgentSession:
    """Validate a manifest and keep a copy (and its plan) in the session's home directory."""
    session = load_manifest(manifest_path)
    session_dir = home.session_dir(session.session_id)
    session_dir.mkdir(parents=True, exist_ok=True)
    manifest = session.to_manifest()
    executor = session.spec.executor
    if executor.type == "scripted" and executor.plan:
        plan_source = (manifest_path.parent / executor.plan).resolve()
        if not plan_source.is_file():
            raise ManifestError(f"{manifest_path}: spec.executor.plan: {plan_source} does not exist")
        shutil.copyfile(plan_source, home.plan_file(session.session_id))
        manifest["spec"]["executor"]["plan"] = str(home.plan_file(session.session_id))
    for sub in manifest["spec"]["subagents"]:
        for item in sub.get("inputs", []):
            source = (manifest_path.parent / item["source"]).resolve()
            if not source.is_dir():
                raise ManifestError(f"{manifest_path}: input directory {item['source']} does not exist")
            item["source"] = str(source)
    home.manifest_file(session.session_id).write_text(yaml.safe_dump(manifest, sort_keys=False))
    return load_manifest(home.manifest_file(session.session_id))


def load_installed(home: LocalHome, session_id: str) -> AgentSession:
    if not home.session_exists(session_id):
        raise ManifestError(f"unknown session {session_id!r} in {home.root}")
    return load_manifest(home.manifest_file(session_id))


def read_inputs(session: AgentSession) -> dict[str, list[tuple[str, bytes]]]:
    return {
        sub.name: [
            (name, path.read_bytes())
            for item in sub.inputs
            for name, path in input_files(Path(item.source), item.target)
        ]
        for sub in session.spec.subagents
    }


LOCAL_USER = Actor(kind="user", name="belay run")


async def record_request(store: EventStore, session: AgentSession) -> None:
    """The request, recorded once before the first attempt: on a cluster the operator does this;
    here there is no operator, so the runtime that starts the harness does."""
    if await store.latest(session.session_id, UserInput.EVENT_TYPE) is not None:
        return
    request = UserInput(goal=session.spec.request.goal, parts=dict(session.spec.request.parts))
    await store.append(
        session.session_id,
        [EventDraft(payload=request, actor=LOCAL_USER)],
        idempotency_key=f"request/{session.session_id}",
    )


async def run_local(
    home: LocalHome,
    session: AgentSession,
    *,
    on_event: Callable[[Event], None] | None = None,
    with_ticket_service: bool = True,
) -> HarnessResult:
    """One harness attempt in this process, with local sandboxes and the local ticket service."""
    store = home.open_event_store()
    artifacts = home.open_artifact_store()
    service = None
    tickets = None
    home.logs_dir(session.session_id).mkdir(parents=True, exist_ok=True)
    log = (home.logs_dir(session.session_id) / "harness.log").open("a", buffering=1)

    def record_and_forward(event: Event) -> None:
        who = event.actor.subagent or "-"
        log.write(f"{event.created_at.isoformat()} attempt={event.actor.attempt} {who} {fault_key(event)}\n")
        if on_event is not None:
            on_event(event)

    harness: Harness | None = None
    try:
        if with_ticket_service:
            from belay.local.tickets import TicketService

            service = await TicketService(home.tickets_file(session.session_id)).start()
            tickets = LocalTickets(service.url)
        await record_request(store, session)
        harness = Harness(
            session=session,
            store=store,
            artifacts=artifacts,
            sandboxes=GuardedSandboxProvider(
                LocalSandboxProvider(home.sandboxes_dir(session.session_id)),
                home.session_dir(session.session_id),
            ),
            executors=executor_factory_for(session),
            tickets=tickets,
            inputs=read_inputs(session),
            holder=this_holder(),
            model_id=initial_model_id(session),
            on_event=record_and_forward,
        )
        return await harness.run()
    finally:
        # Only the newest attempt may clean up: a superseded one must not stop its replacement's
        # sandboxes.
        newest = False
        if harness is not None and harness.lease:
            lease = await store.current_lease(session.session_id)
            newest = lease is not None and lease.number == harness.lease
        if service is not None:
            await service.stop()
        await store.close()
        log.close()
        if newest:
            stop_leftover_sandboxes(home, session)


def stop_leftover_sandboxes(home: LocalHome, session: AgentSession) -> None:
    """Stop sandbox servers an earlier, killed process left running (they run in their own
    process groups, so killing the harness's group does not reach them)."""
    from belay.sandbox.local import stop_recorded_server

    for sub in session.spec.subagents:
        stop_recorded_server(home.sandboxes_dir(session.session_id) / sub.name)


async def read_state(home: LocalHome, session_id: str) -> tuple[SessionState, list[Event]]:
    from belay.journal.state import fold

    store = home.open_event_store()
    try:
        events = await store.read(session_id)
    finally:
        await store.close()
    return fold(events), events
