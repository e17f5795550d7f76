"""The fault hooks both provider stand-ins take (`belay.executors.standins.common` describes each):
what a test arms with `POST /_standin/faults` to make a stand-in behave as a provider does when
things go wrong."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

Json = dict[str, Any]


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CutStream(_Fault):
    kind: Literal["cut_stream"] = "cut_stream"
    after_events: int = Field(ge=0)
    mode: Literal["abort", "clean"] = "abort"
    session_id: str | None = None


class ServerError(_Fault):
    kind: Literal["server_error"] = "server_error"
    path: str
    method: Literal["GET", "POST", "DELETE", "*"] = "*"
    status: int = Field(default=500, ge=500, le=599)
    times: int = Field(default=1, ge=1)
    after_apply: bool = False

    def matches(self, request: web.Request) -> bool:
        return self.method in ("*", request.method) and re.search(self.path, request.path) is not None


class DuplicateEvent(_Fault):
    kind: Literal["duplicate_event"] = "duplicate_event"
    session_id: str | None = None


class DeleteSession(_Fault):
    """Without `session_id`: every session, as a provider that lost them all."""

    kind: Literal["delete_session"] = "delete_session"
    session_id: str | None = None


class FailSession(_Fault):
    """OpenAI only: the session and its active turn fail."""

    kind: Literal["fail_session"] = "fail_session"
    session_id: str
    message: str = "The session failed (stand-in fault)."


class RescheduleSession(_Fault):
    """Anthropic only: the session goes `rescheduling` and comes back after `reads` reads of it."""

    kind: Literal["reschedule_session"] = "reschedule_session"
    session_id: str
    reads: int = Field(default=1, ge=1)


class RecoverSession(_Fault):
    """Anthropic only: a rescheduling session comes back now."""

    kind: Literal["recover_session"] = "recover_session"
    session_id: str


class CompactContext(_Fault):
    """Anthropic only: the remote agent compacts its context now (`agent.thread_context_compacted`)."""

    kind: Literal["compact_context"] = "compact_context"
    session_id: str


class TerminateSession(_Fault):
    """Anthropic only: the session ends for good (`terminated`)."""

    kind: Literal["terminate_session"] = "terminate_session"
    session_id: str


class EndIdleStreams(_Fault):
    """Armed until the stand-in stops: every event stream of a session (of S, or of any) whose
    turn is over ends cleanly, at once when it opens and right after the event that ends a turn,
    as a provider that holds a stream only while its agent works. No event is lost: the session
    still says what happened."""

    kind: Literal["end_idle_streams"] = "end_idle_streams"
    session_id: str | None = None


Fault = Annotated[
    CutStream
    | ServerError
    | EndIdleStreams
    | DuplicateEvent
    | DeleteSession
    | FailSession
    | RescheduleSession
    | RecoverSession
    | CompactContext
    | TerminateSession,
    Field(discriminator="kind"),
]
FAULT = TypeAdapter(Fault)
SessionFault = (
    DeleteSession | FailSession | RescheduleSession | RecoverSession | CompactContext | TerminateSession
)
StreamFaultT = TypeVar("StreamFaultT", CutStream, DuplicateEvent)


class FaultRefused(ValueError):
    pass


def parse_fault(value: Fault | Json) -> Fault:
    if isinstance(value, dict):
        try:
            return FAULT.validate_python(value)
        except ValidationError as error:
            raise FaultRefused(f"not a fault: {error}") from None
    return value
