"""The embedded runtime: a whole session on one machine, no cluster.

Home layout (`--home`, `BELAY_HOME`, default `./.belay`):

    <home>/events.db                  the session record (SQLite), every session
    <home>/artifacts/                 content-addressed artifact store
    <home>/sessions/<id>/session.yaml the manifest as run (plan path made absolute)
    <home>/sessions/<id>/plan.yaml    the plan as run (scripted, or the local stand-in's)
    <home>/sessions/<id>/sandboxes/   one directory per subagent sandbox (workspaces, logs)
    <home>/sessions/<id>/tickets.json the local ticket service's state
    <home>/sessions/<id>/logs/harness.log  one line per event the harness recorded
    <home>/sessions/<id>/standins/<executor>/  a managed executor's local stand-in, when no provider
                                      is configured: ready.json (pid, base URL), standin.log

The record and the artifacts live elsewhere when the manifest names `spec.stores` (etcd:// and
s3:// URLs, opened through `belay.stores.factory` with credentials from the environment), or when
`--events` / `--artifacts` (`BELAY_EVENTS`, `BELAY_ARTIFACTS`) name stores: the session's entry in
the home (its session.yaml) says where its record is, and those options let a home without that
entry (another directory, another machine) read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from belay.api.agentsession import (
    AgentSession,
    ManifestError,
    SubagentSpec,
    load_manifest,
    parse_manifest,
)
from belay.executors import Endpoint, executor_factory_for
from belay.executors.self_hosted import initial_model_id
from belay.harness.attempt import HarnessResult, fault_key
from belay.harness.declared import read_inputs
from belay.harness.loop import Harness
from belay.harness.stopping import StopRequest
from belay.harness.tickets import TicketServiceClient
from belay.journal.events import Actor, Event, EventDraft, UserInput
from belay.journal.state import SessionState
from belay.local.liveness import GuardedSandboxProvider, this_holder
from belay.stores.base import ArtifactStore, EventStore

DEFAULT_HOME = ".belay"
HOME_ENV = "BELAY_HOME"
EVENTS_ENV = "BELAY_EVENTS"
ARTIFACTS_ENV = "BELAY_ARTIFACTS"
SQLITE_HEADER = b"SQLite format 3\x00"


class HomeError(Exception):
    """The home directory cannot be used as one (a file in its place, a record that is no
    database); the message says which and what to do."""


@dataclass(frozen=True)
class LocalHome:
    root: Path
    # Store URLs (`belay.stores.factory`) in place of the home's own events.db and artifacts/.
    events_url: str | None = None
    artifacts_url: str | None = None

    @classmethod
    def resolve(
        cls, home: str | Path | None, events_url: str | None = None, artifacts_url: str | None = None
    ) -> LocalHome:
        return cls(
            Path(home or os.environ.get(HOME_ENV) or DEFAULT_HOME).absolute(),
            events_url or os.environ.get(EVENTS_ENV) or None,
            artifacts_url or os.environ.get(ARTIFACTS_ENV) or None,
        )

    def for_session(self, session_id: str) -> LocalHome:
        """This home with the stores the session's stored manifest names (`spec.stores`), which
        take the place of the home's own and of `--events` / `--artifacts`. A stored manifest that
        cannot be read changes nothing here: the command that needs it says what is wrong."""
        if not self.session_exists(session_id):
            return self
        try:
            stores = load_manifest(self.manifest_file(session_id)).spec.stores
        except ManifestError:
            return self
        return dataclasses.replace(
            self,
            events_url=stores.events or self.events_url,
            artifacts_url=stores.artifacts or self.artifacts_url,
        )

    @property
    def events_location(self) -> str:
        return _shown(self.events_url) if self.events_url else str(self.events_db)

    @property
    def artifacts_location(self) -> str:
        return _shown(self.artifacts_url) if self.artifacts_url else str(self.artifacts_dir)

    @property
    def stores_elsewhere(self) -> bool:
        return bool(self.events_url or self.artifacts_url)

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

    def standin_dir(self, session_id: str, executor_type: str) -> Path:
        return self.session_dir(session_id) / "standins" / executor_type

    def check(self) -> None:
        """Refuse a home that exists but is not one, before any command reads or writes it. Only
        before a store is open: closing any descriptor of a SQLite file drops every lock this
        process holds on it, the open store's included."""
        advice = f"point --home (or {HOME_ENV}) at a Belay home directory, or at a new one"
        if self.root.exists() and not self.root.is_dir():
            raise HomeError(f"home {self.root} is not a directory; {advice}")
        for directory in (self.artifacts_dir, self.root / "sessions"):
            if directory.exists() and not directory.is_dir():
                raise HomeError(f"home {self.root}: {directory} is not a directory; {advice}")
        if self.events_db.exists():
            try:
                with self.events_db.open("rb") as handle:
                    header = handle.read(len(SQLITE_HEADER))
            except OSError as error:
                raise HomeError(f"home {self.root}: cannot read {self.events_db}: {error.strerror}") from None
            if header and header != SQLITE_HEADER:
                raise HomeError(
                    f"home {self.root}: {self.events_db} is not a session record (not SQLite); {advice}"
                )

    def open_event_store(self) -> EventStore:
        from belay.stores.sqlite import SqliteEventStore

        if self.events_url:
            return _open_store("event", self.events_url)

        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise HomeError(
                f"cannot create home {self.root}: {error.strerror}; choose another --home"
            ) from None
        return SqliteEventStore(self.events_db)

    def open_artifact_store(self) -> ArtifactStore:
        from belay.stores.filesystem import FilesystemArtifactStore

        if self.artifacts_url:
            return _open_store("artifact", self.artifacts_url)

        return FilesystemArtifactStore(self.artifacts_dir)

    def session_exists(self, session_id: str) -> bool:
        return self.manifest_file(session_id).is_file()


def _shown(url: str) -> str:
    """A store URL as a briefing shows it: without user info, which could hold a password."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _open_store(kind: str, url: str) -> Any:
    from belay.stores import factory

    opener = factory.open_event_store if kind == "event" else factory.open_artifact_store
    try:
        return opener(url)
    except (ValueError, KeyError) as error:
        option = "--events" if kind == "event" else "--artifacts"
        raise HomeError(
            f"cannot open the {kind} store {_shown(url)}: {error}; check {option} or spec.stores"
        ) from None


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
            resources=subagent.resources,
        )


@dataclass(frozen=True)
class Installation:
    """A manifest checked for the embedded runtime, in the form it is stored, not yet written."""

    session: AgentSession
    manifest: dict[str, Any]  # the plan path and input sources made absolute
    plan: bytes | None  # the scripted plan's bytes


def prepare_session(home: LocalHome, manifest_path: Path) -> Installation:
    """Everything `belay run` can check before it writes anything: the manifest against the API
    models, then what only this machine can see (the plan file and its contents, the input
    directories) and what the embedded runtime does not do (forkFrom, a Secret for the stores)."""
    session = load_manifest(manifest_path)
    where, spec = str(manifest_path), session.spec
    if spec.fork_from is not None:
        raise ManifestError(
            f"{where}: spec.forkFrom: the embedded runtime does not fork sessions; "
            "apply the manifest to a cluster, or remove forkFrom"
        )
    if spec.stores.secret_ref is not None:
        raise ManifestError(
            f"{where}: spec.stores.secretRef: the embedded runtime reads no Kubernetes Secret; "
            "remove secretRef and give the stores' credentials in the environment "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for S3)"
        )
    manifest = session.to_manifest()
    plan = None
    if spec.executor.plan:  # scripted: the plan it follows; managed: what the local stand-in follows
        plan = _read_plan(manifest_path.parent / spec.executor.plan, session, where)
        manifest["spec"]["executor"]["plan"] = str(home.plan_file(session.session_id))
    for sub_index, sub in enumerate(manifest["spec"]["subagents"]):
        for input_index, item in enumerate(sub.get("inputs", [])):
            field = f"spec.subagents[{sub_index}].inputs[{input_index}].source"
            item["source"] = str(_input_directory(manifest_path.parent / item["source"], f"{where}: {field}"))
    return Installation(parse_manifest(manifest, source=where), manifest, plan)


def _read_plan(path: Path, session: AgentSession, where: str) -> bytes:
    from belay.harness.models.scripted import PlanError, parse_plan, plan_problems

    field = f"{where}: spec.executor.plan"
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ManifestError(f"{field}: cannot read {path}: {error.strerror or error}") from None
    try:
        plan = parse_plan(data, source=str(path))
    except PlanError as error:
        raise ManifestError(f"{field}: {error}") from None
    problems = plan_problems(plan, [sub.name for sub in session.spec.subagents])
    if problems:
        raise ManifestError(f"{field}: {path}: {'; '.join(problems)}")
    return data


def _input_directory(path: Path, field: str) -> Path:
    """The absolute input directory, refused when it is missing or holds a symlink: inputs are
    copied file by file, and a link would copy whatever it points at, inside the directory or not."""
    if not path.is_dir():
        raise ManifestError(f"{field}: {path} is not a directory")
    for directory, subdirectories, files in os.walk(path):
        for name in sorted(subdirectories + files):
            if (Path(directory) / name).is_symlink():
                link = (Path(directory) / name).relative_to(path)
                raise ManifestError(
                    f"{field}: {path} contains a symlink, {link}; inputs are copied file by file: "
                    "replace the link with what it points at, or move it out of the directory"
                )
    return path.resolve()


def install_session(home: LocalHome, manifest_path: Path) -> AgentSession:
    """Validate a manifest and keep a copy (and its plan) in the session's home directory. Nothing
    is written when anything is refused, and a stored session keeps the manifest and plan it was
    started with: a different one under its name is refused."""
    installation = prepare_session(home, manifest_path)
    session_id = installation.session.session_id
    if home.session_exists(session_id):
        difference = _stored_difference(home, installation)
        if difference:
            raise ManifestError(
                f"{manifest_path}: session {session_id} already exists in {home.root} with {difference}; "
                f"continue it with `belay resume {session_id}`, or run this manifest under another "
                "metadata.name or another --home"
            )
        return installation.session
    home.session_dir(session_id).mkdir(parents=True, exist_ok=True)
    if installation.plan is not None:
        _write_atomically(home.plan_file(session_id), installation.plan)
    _write_atomically(
        home.manifest_file(session_id), yaml.safe_dump(installation.manifest, sort_keys=False).encode()
    )
    return installation.session


def _stored_difference(home: LocalHome, installation: Installation) -> str:
    """How the stored manifest and plan differ from these ("" when they do not)."""
    session_id = installation.session.session_id
    try:
        stored = load_installed(home, session_id)
    except ManifestError:
        return "a stored manifest that cannot be read"
    if stored.to_manifest() != installation.session.to_manifest():
        return "a different manifest"
    if installation.plan is not None:
        try:
            if home.plan_file(session_id).read_bytes() != installation.plan:
                return "a different plan"
        except OSError:
            return "a stored plan that cannot be read"
    return ""


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def unknown_session(session_id: str, home: LocalHome) -> str:
    """The home defaults to ./.belay, so a command run from another directory finds nothing."""
    if home.events_url:
        return (
            f"unknown session {session_id!r} in the event store {home.events_url}; check the "
            f"session's name, or point --events (or {EVENTS_ENV}) at the store it ran on"
        )
    return (
        f"unknown session {session_id!r} in {home.root}; run it there, or point --home "
        f"(or {HOME_ENV}) at the home it ran in"
    )


def load_installed(home: LocalHome, session_id: str) -> AgentSession:
    """The manifest a session was started with, and its plan, both still usable."""
    from belay.harness.models.scripted import PlanError, load_plan

    if not home.session_exists(session_id):
        raise ManifestError(unknown_session(session_id, home))
    advice = "`belay run` wrote it: restore it from a backup, or run the session again under another --home"
    try:
        session = load_manifest(home.manifest_file(session_id))
        if session.spec.executor.type == "scripted":
            load_plan(Path(session.spec.executor.plan or ""))
    except (ManifestError, PlanError) as error:
        raise ManifestError(
            f"the stored manifest of session {session_id} cannot be used: {error}; {advice}"
        ) from None
    return session


LOCAL_USER = Actor(kind="user", name="belay run")


async def record_request(store: EventStore, session: AgentSession) -> None:
    """The request, recorded once before the first attempt: on a cluster the operator does this;
    here there is no operator, so the runtime that starts the harness does."""
    if await store.latest(session.session_id, UserInput.EVENT_TYPE) is not None:
        return
    request = UserInput(
        goal=session.spec.request.goal,
        parts=dict(session.spec.request.parts),
        executor=session.spec.executor.model_dump(mode="json", by_alias=True, exclude_none=True),
    )
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
    stop: StopRequest | None = None,
) -> HarnessResult:
    """One harness attempt in this process, with local sandboxes and the local ticket service;
    `stop`, set by a signal handler, stops it cleanly (belay.harness.stopping)."""
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
        session = await on_recorded_executor(store, artifacts, session)
        async with provider_endpoint(home, session) as endpoint:
            if with_ticket_service:
                from belay.local.tickets import TicketService

                service = await TicketService(home.tickets_file(session.session_id)).start()
                tickets = TicketServiceClient(service.url)
            await record_request(store, session)
            harness = Harness(
                session=session,
                store=store,
                artifacts=artifacts,
                sandboxes=GuardedSandboxProvider(
                    LocalSandboxProvider(home.sandboxes_dir(session.session_id)),
                    home.session_dir(session.session_id),
                ),
                executors=executor_factory_for(session, endpoint),
                tickets=tickets,
                inputs=read_inputs(session),
                holder=this_holder(),
                model_id=model_id_for(session, endpoint),
                on_event=record_and_forward,
                stop=stop,
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


async def on_recorded_executor(
    store: EventStore, artifacts: ArtifactStore, session: AgentSession
) -> AgentSession:
    """The session on the executor its record last moved it to (`belay resume --executor`), else
    on its manifest's: the record, not the manifest on disk, says which executor runs it."""
    from belay.journal.snapshots import load_state

    state = (await load_state(store, artifacts, session.session_id)).state
    return session.as_recorded(state.executor_changes)


@contextlib.asynccontextmanager
async def provider_endpoint(home: LocalHome, session: AgentSession) -> AsyncIterator[Endpoint | None]:
    """A managed executor's provider for the attempt (`session_provider`). None: self-hosted."""
    yield await asyncio.to_thread(session_provider, home, session)


def session_provider(home: LocalHome, session: AgentSession) -> Endpoint | None:
    """A managed executor's provider: the one the SDK's standard variables configure, else the
    session's local stand-in following the manifest's plan (`belay.local.standin_process`: found
    in the home while it runs, else started, and left running after this process, as a
    provider's service is). None: self-hosted."""
    from belay.executors.endpoints import PROVIDERS, configured_endpoint, standin_endpoint
    from belay.local.standin_process import StandinProcess

    executor = session.spec.executor
    if not executor.managed:
        return None
    endpoint = configured_endpoint(executor.type, os.environ)
    if endpoint is not None:
        return endpoint
    if not executor.plan:
        variables = PROVIDERS[executor.type]
        raise ManifestError(
            f"{executor.type}: no provider is configured ({variables.api_key} and {variables.base_url} "
            "are unset) and the manifest has no executor.plan for the local stand-in: set one of them"
        )
    directory = home.standin_dir(session.session_id, executor.type)
    standin = StandinProcess.for_session(executor.type, Path(executor.plan), directory)
    return standin_endpoint(standin.base_url)


def model_id_for(session: AgentSession, endpoint: Endpoint | None) -> str:
    """What the attempt says decides: where a local stand-in answers, its scripted plan."""
    from belay.executors.endpoints import standin_model_id

    if endpoint is not None and endpoint.standin:
        return standin_model_id(session.spec.executor.model or "")
    return initial_model_id(session)


def stop_leftover_sandboxes(home: LocalHome, session: AgentSession) -> None:
    """Stop sandbox servers an earlier, killed process left running (they run in their own
    process groups, so killing the harness's group does not reach them)."""
    from belay.sandbox.local import stop_recorded_server

    for sub in session.spec.subagents:
        stop_recorded_server(home.sandboxes_dir(session.session_id) / sub.name)


async def load_session_state(home: LocalHome, session_id: str) -> SessionState:
    """The session's state as a reader needs it: the latest usable snapshot plus the events after
    it, so a command costs the same at any history length (`belay.journal.snapshots`)."""
    from belay.journal.snapshots import load_state

    store = home.open_event_store()
    try:
        return (await load_state(store, home.open_artifact_store(), session_id)).state
    finally:
        await store.close()


async def read_state(home: LocalHome, session_id: str) -> tuple[SessionState, list[Event]]:
    from belay.journal.state import fold

    store = home.open_event_store()
    try:
        events = await store.read(session_id)
    finally:
        await store.close()
    return fold(events), events
