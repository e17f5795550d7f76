"""The embedded runtime: a whole session on one machine, no cluster.

Home layout (`--home`, `BELAY_HOME`, default `./.belay`):

    <home>/events.db                  the session record (SQLite), every session
    <home>/effect.key                 the key of the marks on external effects (0600, made once)
    <home>/artifacts/                 content-addressed artifact store
    <home>/sessions/<id>/session.yaml the manifest as run (plan path made absolute)
    <home>/sessions/<id>/plan.yaml    the plan as run (scripted, or the local stand-in's)
    <home>/sessions/<id>/plan-source  where that plan was read from: a child session's plan is
                                      read next to it (`belay.local.children`)
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

import contextlib
import dataclasses
import json
import os
import secrets
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import yaml

from belay.api.agentsession import (
    AgentSession,
    ManifestError,
    StoresSpec,
    SubagentSpec,
    load_manifest,
    parse_manifest,
)
from belay.api.bounded_yaml import FileRefused, read_regular_file
from belay.executors.factory import Endpoint, executor_factory_for
from belay.executors.self_hosted import initial_model_id
from belay.harness.attempt import HarnessResult, fault_key
from belay.harness.declared import DeclaredInputs
from belay.harness.effect_marks import EffectKeyError, key_in_file
from belay.harness.loop import Harness
from belay.harness.stopping import StopRequest
from belay.harness.tickets import TicketServiceClient
from belay.journal.events import Actor, Event, EventDraft, SessionLink, UserInput
from belay.journal.phase import Phase, end_reason, phase_of
from belay.journal.state import SessionState
from belay.local.artifact_inputs import pin_artifact_input
from belay.local.liveness import GuardedSandboxProvider, this_holder
from belay.stores.base import ArtifactStore, EventStore, RecordCorrupt

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
            return self.with_stores(load_manifest(self.manifest_file(session_id)).spec.stores)
        except ManifestError:
            return self

    def with_stores(self, stores: StoresSpec) -> LocalHome:
        """This home with the stores a manifest names (`spec.stores`) in place of its own."""
        events, artifacts = stores.events or self.events_url, stores.artifacts or self.artifacts_url
        return dataclasses.replace(self, events_url=events, artifacts_url=artifacts)

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

    @property
    def effect_key_file(self) -> Path:
        return self.root / "effect.key"

    def effect_key(self) -> bytes:
        """The key of the marks on this home's external effects (`belay.harness.effect_marks`)."""
        try:
            return key_in_file(self.effect_key_file)
        except EffectKeyError as error:
            raise HomeError(str(error)) from None

    def session_dir(self, session_id: str) -> Path:
        return self.root / "sessions" / session_id

    def manifest_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "session.yaml"

    def plan_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "plan.yaml"

    def plan_source_file(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "plan-source"

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

    def keep_private(self) -> None:
        """The home is its owner's alone (0700), whatever the umask it was made under: the record,
        the artifacts and the workspaces beneath it hold what the sessions read and wrote. Every
        `belay` command also runs under umask 077 (`belay.cli.main`), so what it creates inside is
        0600 (directories 0700); a home made before keeps its files, unreachable to others once
        its directory is closed."""
        with contextlib.suppress(FileNotFoundError, PermissionError):
            info = self.root.stat()
            if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
                os.chmod(self.root, stat.S_IMODE(info.st_mode) & 0o700)

    def create(self) -> None:
        """The home directory, made private (`keep_private`) before anything is written in it."""
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise HomeError(
                f"cannot create home {self.root}: {error.strerror}; choose another --home"
            ) from None
        self.keep_private()

    def open_event_store(self, *, read_only: bool = False) -> EventStore:
        """The session record's store; `read_only` for a command that only reads it, which then
        works on a full disk and cannot change it (`belay.stores.sqlite.opening`)."""
        from belay.stores.sqlite import SqliteEventStore

        if self.events_url:
            return _open_store("event", self.events_url)
        if read_only:
            return SqliteEventStore(self.events_db, read_only=True)
        self.create()
        return SqliteEventStore(self.events_db)

    def open_artifact_store(self) -> ArtifactStore:
        from belay.stores.filesystem import FilesystemArtifactStore

        if self.artifacts_url:
            return _open_store("artifact", self.artifacts_url)

        self.create()
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
    plan_source: Path | None = None  # where they were read from


def prepare_session(home: LocalHome, manifest_path: Path) -> Installation:
    """Everything `belay run` can check before it writes anything: the manifest against the API
    models, then what only this machine can see (the plan file and its contents, the input
    directories) and what the embedded runtime does not do (forkFrom, adoptRecord, a Secret for
    the stores)."""
    return prepare_parsed(home, load_manifest(manifest_path), manifest_path.parent, str(manifest_path))


def prepare_parsed(home: LocalHome, session: AgentSession, base: Path, where: str) -> Installation:
    """`prepare_session` of a manifest already parsed, its relative paths read from `base`."""
    spec = session.spec
    if spec.fork_from is not None:
        raise ManifestError(
            f"{where}: spec.forkFrom: the embedded runtime does not fork sessions; "
            "apply the manifest to a cluster, or remove forkFrom"
        )
    if spec.adopt_record:
        raise ManifestError(
            f"{where}: spec.adoptRecord: the embedded runtime binds no record to an AgentSession's "
            "uid, so there is nothing to adopt; remove adoptRecord"
        )
    if spec.stores.secret_ref is not None:
        raise ManifestError(
            f"{where}: spec.stores.secretRef: the embedded runtime reads no Kubernetes Secret; "
            "remove secretRef and give the stores' credentials in the environment "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for S3)"
        )
    manifest = session.to_manifest()
    plan = plan_source = None
    if spec.executor.plan:  # scripted: the plan it follows; managed: what the local stand-in follows
        plan_source = (base / spec.executor.plan).absolute()
        plan = _read_plan(plan_source, session, where)
        manifest["spec"]["executor"]["plan"] = str(home.plan_file(session.session_id))
    for sub_index, sub in enumerate(manifest["spec"]["subagents"]):
        for input_index, item in enumerate(sub.get("inputs", [])):
            if "artifact" in item:  # read from the record of a session of this home, and pinned
                artifact_field = f"{where}: spec.subagents[{sub_index}].inputs[{input_index}].artifact"
                pin_artifact_input(home, session, item["artifact"], artifact_field)
                continue
            if "git" in item:
                _no_git_credentials(
                    item["git"], f"{where}: spec.subagents[{sub_index}].inputs[{input_index}]"
                )
                continue  # fetched by the harness when the subagent's first sandbox starts
            field = f"{where}: spec.subagents[{sub_index}].inputs[{input_index}].source"
            if not item.get("hostPath"):
                _beside_the_manifest(base / item["source"], base, field)
            source = _input_directory(base / item["source"], field)
            # Stored absolute, so the stored manifest names the same directory from anywhere: a
            # host path by now, checked above.
            item["source"], item["hostPath"] = str(source), True
    return Installation(parse_manifest(manifest, source=where), manifest, plan, plan_source)


def _no_git_credentials(git: dict[str, Any], field: str) -> None:
    if "credentialsSecret" in git:
        raise ManifestError(
            f"{field}.git.credentialsSecret: the embedded runtime reads no Kubernetes Secret; "
            "remove credentialsSecret and fetch a repository that needs none (a file:/// URL of a "
            "local clone, or a server on this machine)"
        )


def _beside_the_manifest(source: Path, manifest_dir: Path, field: str) -> None:
    """A source that is not marked as a host path stays inside the manifest's directory, symlinks
    resolved: a link there to `/etc` is as far out as `source: /etc`."""
    if not source.resolve().is_relative_to(manifest_dir.resolve()):
        raise ManifestError(
            f"{field}: {source} is {source.resolve()}, outside the manifest's directory "
            f"{manifest_dir.resolve()}; "
            "set hostPath: true on the input to copy a directory from elsewhere on the host"
        )


def _read_plan(path: Path, session: AgentSession, where: str) -> bytes:
    from belay.harness.models.scripted import PlanError, parse_plan, plan_problems

    field = f"{where}: spec.executor.plan"
    try:
        data = read_regular_file(path)
    except FileRefused as error:
        raise ManifestError(f"{field}: {path}: {error}") from None
    try:
        plan = parse_plan(data, source=str(path))
    except PlanError as error:
        raise ManifestError(f"{field}: {error}") from None
    subagents = [sub.name for sub in session.spec.subagents]
    servers = {sub.name: {server.name for server in sub.tool_servers} for sub in session.spec.subagents}
    problems = plan_problems(plan, subagents, servers) + _child_plan_problems(
        plan, path.parent, subagents, {path}
    )
    if problems:
        raise ManifestError(f"{field}: {path}: {'; '.join(problems)}")
    return data


def _child_plan_problems(plan: Any, base: Path, subagents: list[str], seen: set[Path]) -> list[str]:
    """The plans a scripted coordinator's `start_session` calls name, read and checked now (each
    child runs the coordinator's subagents): a child's unknown tool is found at `belay run`, not
    once the child starts, when its cause was only in the coordinator's log. A child that is a
    coordinator itself has its children's plans checked too, each plan once."""
    from belay.harness.models.scripted import PlanError, parse_plan, plan_problems

    problems = []
    for name, subplan in plan.subagents.items():
        for step in subplan.steps:
            for action in [*step.actions, *(a for v in step.variants for a in v.actions)]:
                child_plan = action.arguments.get("plan") if action.tool == "start_session" else None
                if not isinstance(child_plan, str) or not child_plan:
                    continue
                where = f"subagents.{name}.{step.id}: child session {action.arguments.get('name')!r}"
                path = base / child_plan
                if path.resolve() in seen:
                    continue
                seen.add(path.resolve())
                try:
                    child = parse_plan(read_regular_file(path), source=child_plan)
                except FileRefused as error:
                    problems.append(f"{where}: {path}: {error}")
                    continue
                except PlanError as error:
                    problems.append(f"{where}: {error}")
                    continue
                problems += [
                    f"{where}: {child_plan}: {problem}" for problem in plan_problems(child, subagents)
                ]
                problems += _child_plan_problems(child, path.parent, subagents, seen)
    return problems


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
    write_installation(home, installation)
    return installation.session


def write_installation(home: LocalHome, installation: Installation) -> None:
    """The session's entry in the home: its plan (and where it came from), then its manifest,
    each written whole, the manifest last (a session exists once its manifest does)."""
    session_id = installation.session.session_id
    home.create()
    home.session_dir(session_id).mkdir(mode=0o700, parents=True, exist_ok=True)
    if installation.plan is not None:
        _write_atomically(home.plan_file(session_id), installation.plan)
    if installation.plan_source is not None:
        _write_atomically(home.plan_source_file(session_id), str(installation.plan_source).encode())
    _write_atomically(
        home.manifest_file(session_id), yaml.safe_dump(installation.manifest, sort_keys=False).encode()
    )


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
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
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


def record_traces(home: LocalHome, session_id: str) -> list[str]:
    """What in the home shows that the session's record has events: its harness log has a line
    (written after each event an attempt recorded), or its sandboxes exist (started after its
    request was recorded), or its ticket service filed a ticket (an effect a new attempt would
    repeat). Its manifest alone is no sign: `belay run` writes it before anything
    is recorded, and a run refused then (a provider not configured) leaves it behind."""
    traces = []
    log = home.logs_dir(session_id) / "harness.log"
    with contextlib.suppress(OSError):
        if log.stat().st_size:
            traces.append(f"its harness log {log} lists events recorded")
    sandboxes = home.sandboxes_dir(session_id)
    with contextlib.suppress(OSError):
        if any(sandboxes.iterdir()):
            traces.append(f"its sandboxes are in {sandboxes}")
    tickets = home.tickets_file(session_id)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if json.loads(tickets.read_bytes()).get("tickets"):  # our own file, written by the ticket service
            traces.append(f"its ticket service filed tickets ({tickets})")
    return traces


def missing_record(home: LocalHome, session_id: str) -> RecordCorrupt | None:
    """RecordCorrupt for a session this home ran whose record has no events (None when nothing
    says it ran): a record emptied, cut short or lost is never taken for a new session, which a
    new attempt would start over, repeating every effect the session had."""
    traces = record_traces(home, session_id)
    if not traces:
        return None
    return RecordCorrupt(
        session_id,
        1,
        f"{home.events_location} holds no event of it, but this home ran it ({'; '.join(traces)}): its "
        "record was emptied, cut short or lost (or --events names another store than it ran on), and "
        "a new attempt would start it over and repeat what it did",
    )


def check_record_present(home: LocalHome, session_id: str, last_seq: int) -> None:
    """Raise `missing_record` when the record read has no events of a session the home ran."""
    if not last_seq:
        missing = missing_record(home, session_id)
        if missing is not None:
            raise missing


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


class Following(Protocol):
    """What follows an attempt's child sessions (`belay.local.children.LocalChildren`)."""

    def begin(self) -> None: ...

    async def close(self) -> None: ...


# Given the session, its event store and its artifact store: the follower of its children.
ChildrenFollower = Callable[[AgentSession, EventStore, ArtifactStore], Following]


async def run_local(
    home: LocalHome,
    session: AgentSession,
    *,
    on_event: Callable[[Event], None] | None = None,
    with_ticket_service: bool = True,
    stop: StopRequest | None = None,
    children: ChildrenFollower | None = None,
) -> HarnessResult:
    """One harness attempt in this process, with local sandboxes and the local ticket service;
    `stop`, set by a signal handler, stops it cleanly (belay.harness.stopping). `children` starts
    and follows the child sessions its record starts (`belay.local.children.LocalChildren.follower`,
    which `belay run` passes); without it the attempt's `start_session` is refused."""
    store = home.open_event_store()
    artifacts = home.open_artifact_store()
    service = None
    tickets = None
    home.logs_dir(session.session_id).mkdir(parents=True, exist_ok=True)
    log = (home.logs_dir(session.session_id) / "harness.log").open("a", buffering=1)
    following = children(session, store, artifacts) if children is not None else None

    def record_and_forward(event: Event) -> None:
        who = event.actor.subagent or "-"
        log.write(f"{event.created_at.isoformat()} attempt={event.actor.attempt} {who} {fault_key(event)}\n")
        if following is not None and isinstance(event.payload, SessionLink):
            following.begin()  # followed from the first child on, not before
        if on_event is not None:
            on_event(event)

    harness: Harness | None = None
    try:
        check_record_present(home, session.session_id, await store.last_seq(session.session_id))
        session, state = await on_recorded_executor(store, artifacts, session)
        if following is not None and state.children:
            following.begin()
        async with provider_endpoint(home, session) as endpoint:
            if with_ticket_service:
                from belay.local.tickets import TicketService

                # This attempt's credential: in this process's memory only, never in a sandbox's.
                credential = secrets.token_urlsafe(32)
                service = await TicketService(home.tickets_file(session.session_id), credential).start()
                tickets = TicketServiceClient(service.url, credential)
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
                effect_key=home.effect_key(),
                inputs=DeclaredInputs(session, artifacts=artifacts),
                holder=this_holder(),
                model_id=model_id_for(session, endpoint),
                on_event=record_and_forward,
                stop=stop,
                children_followed=following is not None,
            )
            return await proven(harness.run(), store, artifacts, session.session_id)
    finally:
        if following is not None:
            await following.close()
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


async def proven(
    running: Awaitable[HarnessResult], store: EventStore, artifacts: ArtifactStore, session_id: str
) -> HarnessResult:
    """The attempt's result, judged by the record: a run that says it completed the session has
    completed it only when the record proves it (belay.journal.proof); otherwise it ended without
    succeeding, saying what is missing."""
    from belay.journal.snapshots import load_state

    result = await running
    if not result.completed:
        return result
    state = (await load_state(store, artifacts, session_id)).state
    if phase_of(state) == Phase.SUCCEEDED:
        return result
    return dataclasses.replace(result, completed=False, detail=end_reason(state))


async def on_recorded_executor(
    store: EventStore, artifacts: ArtifactStore, session: AgentSession
) -> tuple[AgentSession, SessionState]:
    """The session on the executor its record last moved it to (`belay resume --executor`), else
    on its manifest's: the record, not the manifest on disk, says which executor runs it; and the
    state it was read from."""
    from belay.journal.snapshots import load_state

    state = (await load_state(store, artifacts, session.session_id)).state
    return session.as_recorded(state.executor_changes), state


@contextlib.asynccontextmanager
async def provider_endpoint(
    home: LocalHome, session: AgentSession
) -> AsyncIterator[Endpoint | Future[Endpoint] | None]:
    """A managed executor's provider for the attempt: the one the SDK's standard variables
    configure, else the session's local stand-in (`session_standin`). None: self-hosted. The
    stand-in, which may have to be started (about 0.4 s: a Python process of its own), is found or
    started in a thread beside the attempt's own start: the endpoint is then a future, which the
    executors wait for when they are built, after the attempt's first event."""
    from belay.executors.endpoints import configured_endpoint

    executor = session.spec.executor
    configured = configured_endpoint(executor.type, os.environ) if executor.managed else None
    if not executor.managed or configured is not None:
        yield configured
        return
    standin_plan(session)  # no plan: refused here, before the attempt starts
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="standin") as starting:
        yield starting.submit(session_standin, home, session)


def session_standin(home: LocalHome, session: AgentSession) -> Endpoint:
    """The session's local stand-in following the manifest's plan (`belay.local.standin_process`:
    found in the home while it runs, else started, and left running after this process, as a
    provider's service is)."""
    from belay.executors.endpoints import standin_endpoint
    from belay.local.standin_process import StandinProcess

    executor = session.spec.executor
    directory = home.standin_dir(session.session_id, executor.type)
    standin = StandinProcess.for_session(executor.type, standin_plan(session), directory)
    return standin_endpoint(standin.base_url)


def standin_plan(session: AgentSession) -> Path:
    """The plan the session's local stand-in follows, or why there is none (no provider is
    configured either: a managed session with neither cannot run here)."""
    from belay.executors.endpoints import PROVIDERS

    executor = session.spec.executor
    if not executor.plan:
        variables = PROVIDERS[executor.type]
        raise ManifestError(
            f"{executor.type}: no provider is configured ({variables.api_key} and {variables.base_url} "
            "are unset) and the manifest has no executor.plan for the local stand-in: set one of them"
        )
    return Path(executor.plan)


def model_id_for(session: AgentSession, endpoint: Endpoint | Future[Endpoint] | None) -> str:
    """What the attempt says decides: where a local stand-in answers (or is starting), its
    scripted plan."""
    from belay.executors.endpoints import standin_model_id

    if isinstance(endpoint, Future) or (endpoint is not None and endpoint.standin):
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
    it, so a command costs the same at any history length (`belay.journal.snapshots`); read
    without writing, and RecordCorrupt when the home ran the session but its record has no events
    (`missing_record`)."""
    from belay.journal.snapshots import load_state

    store = home.open_event_store(read_only=True)
    try:
        state = (await load_state(store, home.open_artifact_store(), session_id)).state
    finally:
        await store.close()
    check_record_present(home, session_id, state.last_seq)
    return state


async def read_state(home: LocalHome, session_id: str) -> tuple[SessionState, list[Event]]:
    from belay.journal.state import fold

    store = home.open_event_store(read_only=True)
    try:
        events = await store.read(session_id)
    finally:
        await store.close()
    check_record_present(home, session_id, len(events))
    return fold(events), events
