"""A managed provider, as a managed executor (`belay.executors.managed`) talks to it: where it is,
what it shows of a remote session (its status, the calls it waits on, its outputs), what its
answers mean, and `ManagedProvider`, the wire format each provider module implements through its
official SDK (`openai_agents`, `anthropic_managed`).

What a provider answers is one of three outcomes (`classify`): the remote session is gone
(`RemoteGone`, a 404 or 410), the provider refused for good (`RemoteRefused`, another 4xx), or it
did not answer in a way it may repeat (`RemoteTransient`: no answer, 5xx, 408, 409, 429).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from belay.journal.state import RemoteCallRecord
from belay.journal.tools import ToolSpec

T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """Where the provider is. A None field: the SDK reads its standard variable (`OPENAI_BASE_URL`,
    `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`)."""

    base_url: str | None = None
    api_key: str | None = None
    label: str = ""  # what the record and the briefing say; never a credential
    standin: bool = False  # Belay's local stand-in (`belay.executors.standins`), not a provider
    timeout: float | None = None  # the SDK client's, in seconds; None: the SDK's default


def endpoint_label(base_url: str, what: str) -> str:
    """A base URL fit for the record: user info (a credential) and query dropped."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{urlunsplit((parts.scheme, host, parts.path, '', ''))} ({what})"


@dataclass(frozen=True)
class RemoteCall:
    """A call the remote agent waits on, as the provider shows it."""

    call_id: str
    name: str
    arguments: Any  # a JSON string (OpenAI) or an object (Anthropic), as the provider sent it
    turn_id: str | None = None


class RemoteStatus(StrEnum):
    WORKING = "working"  # the remote agent is busy (or the provider reschedules it)
    WAITING = "waiting"  # it waits on the calls in `pending`
    DONE = "done"  # its turn ended with an answer and nothing is pending
    FAILED = "failed"  # it cannot go on: `failure` says why


@dataclass(frozen=True)
class Snapshot:
    status: RemoteStatus
    pending: tuple[RemoteCall, ...] = ()
    text: str = ""
    model: str = ""
    failure: str = ""
    turn: str = ""  # DONE: what names the turn that ended (its id, or the idle event's)


@dataclass(frozen=True)
class News:
    """What one event of the provider's stream tells the executor."""

    calls: Snapshot | None = None  # the calls it shows waiting, where the API documents that
    busy: bool = False  # only that the remote agent is at work: nothing to do before its next event
    compaction: str = ""  # the provider compacted its conversation (the event's type and id)


@dataclass(frozen=True)
class RemoteOutput:
    output_id: str
    name: str
    media_type: str = "application/octet-stream"


@dataclass(frozen=True)
class ResultToDeliver:
    call: RemoteCallRecord
    ok: bool
    output: str
    error: str | None
    key: str  # derived from the record: the same for every attempt that delivers it
    # This attempt recorded the call, so no attempt before it can have answered it.
    first: bool = False


class Delivery(StrEnum):
    ACCEPTED = "accepted"
    ALREADY_ANSWERED = "already_answered"  # the provider holds a result for the call already


@dataclass(frozen=True)
class TaskBrief:
    """What the remote agent is told: its instructions, the first message, its tools."""

    model: str
    name: str
    instructions: str
    message: str
    tools: tuple[ToolSpec, ...]


class RemoteGone(Exception):
    """The remote session no longer exists (deleted at the provider)."""


class RemoteRefused(Exception):
    """The provider refused a request for good (a 4xx that is not a conflict or a rate limit)."""


class RemoteTransient(Exception):
    """The provider did not answer, or answered an error it may not repeat (5xx, 408, 409, 429)."""


class RemoteEnded(Exception):
    """The remote session failed (or was terminated) while Belay held a result for it."""


class ManagedProvider(abc.ABC):
    """One provider's wire format, through its official SDK. Methods raise `RemoteGone`,
    `RemoteRefused` or `RemoteTransient` (see `classify`) for what the provider answers."""

    kind: str
    waking_events: frozenset[str]  # the stream's event types that may change what comes next
    compaction_events: frozenset[str] = frozenset()  # the provider compacted its conversation
    busy_events: frozenset[str] = frozenset()  # waking, but they say only "at work"

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.client = self.new_client(endpoint)
        # For what must not be sent twice without a look first: the SDK's automatic retry is off.
        self.once = self.client.with_options(max_retries=0)

    @abc.abstractmethod
    def new_client(self, endpoint: Endpoint) -> Any:
        """The SDK's async client for the endpoint (None fields: the SDK's own variables; the
        timeout given to the client when there is one, see `client_options`)."""

    @abc.abstractmethod
    async def close_session(self, session_id: str) -> None:
        """End a remote session Belay no longer uses (replaced by another), where the API allows
        it. Raises as every method does: the caller decides what a failure means."""

    @abc.abstractmethod
    async def find_session(self, metadata: dict[str, str], resources: dict[str, str]) -> str | None:
        """The id of a remote session carrying exactly this metadata, if there is one."""

    @abc.abstractmethod
    async def create_session(
        self,
        metadata: dict[str, str],
        brief: TaskBrief,
        resources: dict[str, str],
        record_resource: Callable[[str, str], Awaitable[None]],
    ) -> str:
        """Create the remote session (and what it needs first, recorded through `record_resource`
        before it is used), with the first message; returns its id. Sent once: never retried."""

    @abc.abstractmethod
    async def snapshot(self, session_id: str) -> Snapshot: ...

    @abc.abstractmethod
    async def deliver(self, session_id: str, result: ResultToDeliver) -> Delivery: ...

    @abc.abstractmethod
    async def send_message(self, session_id: str, text: str, key: str) -> Delivery:
        """A person's message to the remote agent (a user message, which starts its next turn),
        sent once: under `key` where the API takes one, else after a look at the history."""

    @abc.abstractmethod
    async def cancel(self, session_id: str, key: str) -> None: ...

    @abc.abstractmethod
    async def open_stream(self, session_id: str) -> Any:
        """The session's live event stream (the SDK's async stream), open."""

    def heard(self, event: Any, seen: dict[str, Any]) -> Snapshot | None:
        """What the stream shows, as of `event`, where the API documents that its events carry it:
        the calls waiting, or (OpenAI) the turn ended with its answer; None when it shows neither.
        `seen` is this open stream's memory of earlier events (empty when it opens). Everything
        else the executor decides, it decides from a fresh `snapshot`."""
        return None

    async def events(self, session_id: str) -> AsyncIterator[News | None]:
        """Yields None once the live event stream is open, then what each event that may change
        what the executor does next (or a compaction of the remote conversation) tells. Ends or
        raises when the stream is cut."""
        stream = await self.open_stream(session_id)
        seen: dict[str, Any] = {}
        try:
            yield None
            async for event in stream:
                if event.type in self.compaction_events:
                    yield News(compaction=f"{event.type} {getattr(event, 'id', '')}".rstrip())
                    continue
                calls = self.heard(event, seen)
                if calls is not None or event.type in self.waking_events:
                    yield News(calls=calls, busy=event.type in self.busy_events)
        finally:
            await stream.close()

    @abc.abstractmethod
    async def outputs(self, session_id: str) -> list[RemoteOutput]: ...

    @abc.abstractmethod
    async def download(self, session_id: str, output: RemoteOutput) -> bytes: ...

    async def close(self) -> None:
        await self.client.close()


def client_options(endpoint: Endpoint) -> dict[str, Any]:
    """What an SDK client is built with: the endpoint, and its timeout when it has one."""
    options: dict[str, Any] = {"base_url": endpoint.base_url, "api_key": endpoint.api_key}
    if endpoint.timeout is not None:
        options["timeout"] = endpoint.timeout
    return options


def classify(error: BaseException, connection_errors: tuple[type[BaseException], ...]) -> Exception | None:
    """The provider's answer as one of `RemoteGone`, `RemoteRefused`, `RemoteTransient`, or None
    when the error is not the provider's (a bug, which must surface as one)."""
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        text = f"HTTP {status}: {_message_of(error)}"
        if status in (404, 410):  # not found, or gone for good (an expired session)
            return RemoteGone(text)
        if status in (408, 409, 429) or status >= 500:
            return RemoteTransient(text)
        return RemoteRefused(text)
    if isinstance(error, connection_errors):
        return RemoteTransient(f"{type(error).__name__}: {error}")
    return None


def _message_of(error: BaseException) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(error, "message", "") or error)


async def translated(call: Awaitable[T], connection_errors: tuple[type[BaseException], ...]) -> T:
    """Await a provider call, raising the provider's answer as one of the three exceptions."""
    try:
        return await call
    except (RemoteGone, RemoteRefused, RemoteTransient):
        raise
    except Exception as error:
        mapped = classify(error, connection_errors)
        if mapped is None:
            raise
        raise mapped from error
