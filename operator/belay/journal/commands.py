"""The exact commands the briefing and status tell a person to run, in one place so the CLI and
the views cannot drift apart."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable


def approve(session_id: str, item_id: str) -> str:
    """Grants an approval (or answers "yes" to a wait on the user)."""
    return f"belay approve {session_id} {item_id}"


def reject(session_id: str, item_id: str) -> str:
    """Turns down an approval or a deliverable; the reason goes to whoever redoes the step."""
    return f'belay reject {session_id} {item_id} --reason "..."'


def reconcile(session_id: str, operation_id: str, succeeded: bool = True) -> str:
    """Settles an unknown outcome (and the wait on the user that asks about it, if any): it took
    effect (`--succeeded`), or it did not (`--failed`)."""
    return f"belay reconcile {session_id} {operation_id} {'--succeeded' if succeeded else '--failed'}"


def answer(session_id: str, wait_id: str) -> str:
    """Answers a wait on the user (a question or a decision) with text."""
    return f'belay answer {session_id} {wait_id} "..."'


def condition_met(session_id: str, wait_id: str) -> str:
    """Marks an external condition met: a yes to the wait on it."""
    return f"belay approve {session_id} {wait_id}"


# A path segment a download may write under its own name in the working directory.
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9._+@]*")


def written_as(path: str, fallback: str) -> str:
    """Where a printed download writes `path`: the path itself when every segment of it is a plain
    file name (a collected deliverable keeps its child's directory, so two children's `notes.md`
    never land on one file), else its last segment when that one is plain, else `fallback`."""
    segments = path.split("/")
    if all(_PLAIN_SEGMENT.fullmatch(segment) for segment in segments):
        return path
    return segments[-1] if _PLAIN_SEGMENT.fullmatch(segments[-1]) else fallback


def download(session_id: str, name: str) -> str:
    return f"belay artifacts get {session_id} {name} -o {written_as(name, posixpath.basename(name) or name)}"


def fetch(session_id: str, sha256: str, filename: str) -> str:
    """Downloads one blob the session's record names, by its hash, to `filename` (a path of
    plain segments, which the caller makes unique on the page)."""
    return f"belay artifacts get {session_id} sha256:{sha256} -o {written_as(filename, sha256[:12])}"


def resume(session_id: str) -> str:
    """A new harness attempt that recovers the session from its record and continues it."""
    return f"belay resume {session_id}"


def brief(session_id: str) -> str:
    """Where the session stands, and why it ended or stalled."""
    return f"belay brief {session_id}"


def events(session_id: str) -> str:
    """The whole record, in order: what a briefing summarises by counting."""
    return f"belay events {session_id}"


LOCAL_CLI = "belay "
CLUSTER_CLI = "kubectl belay "


def in_cluster(command: str, namespace: str | None = None) -> str:
    """The same command for a session in a cluster: `kubectl belay`, which needs access to
    AgentSessions only, in place of the local `belay`; `-n NAMESPACE` when it is not the
    kubeconfig's own."""
    if not command.startswith(LOCAL_CLI):
        return command
    shown = CLUSTER_CLI + command.removeprefix(LOCAL_CLI)
    return f"{shown} -n {namespace}" if namespace else shown


# How a view spells the commands it names: `local` for the embedded runtime, `in_cluster` for a
# session an operator runs.
CommandStyle = Callable[[str], str]


def local(command: str) -> str:
    """A command as the local `belay` takes it: unchanged."""
    return command


def message(session_id: str, subagent: str | None = None) -> str:
    """A person's next message to a subagent whose turn ended without its deliverable (`--to`
    names the subagent when more than one waits for one)."""
    to = f" --to {subagent}" if subagent else ""
    return f'belay message {session_id}{to} "..."'


def amend(session_id: str) -> str:
    """Changes the request (request version N+1): what depended on the change is redone."""
    return f'belay amend {session_id} --goal "..."'
