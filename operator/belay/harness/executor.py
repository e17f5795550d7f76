"""The executor protocol: whoever decides a subagent's next action.

The harness defines what it drives (`belay.harness.loop`), and `belay.executors` implements it.
The harness keeps everything else (the attempt and its lease, recovery, the tool runtime with
effect classes, approvals, deliverables and waits); an executor only decides. It may be Belay's own
model loop (`self-hosted`: a scripted plan, OpenAI Responses, Anthropic Messages) or a provider's
managed session that holds its own conversation. Tools always run in Belay's sandboxes under the
runtime, so effects, approvals and reconciliation hold whoever decides.

One executor instance serves one subagent within one harness attempt. Everything it must remember
across attempts (remote ids, what was delivered) it records through `ExecutorContext.record`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from belay.api.agentsession import AgentSession, SubagentSpec
from belay.harness.models.base import ToolCall, ToolSchema
from belay.journal.events import Event, Payload, ToolRequest, ToolResult
from belay.journal.state import SessionState
from belay.stores.base import ArtifactStore, EventStore


class ExecutorFailed(Exception):
    """The executor cannot go on, ever (a remote session failed, terminated or deleted): the session
    fails with this reason. The executor has recorded what it saw."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ExecutorUnavailable(ExecutorFailed):
    """The executor cannot go on now (the provider does not answer, refuses the credentials): this
    attempt ends without failing the session, and a later attempt may go on."""


class Decision(BaseModel):
    """One turn of an executor: the calls it wants run, or none when the subagent's work is done."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model_id: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0  # of the input tokens, those read from the provider's prompt cache
    # What the executor took in to decide (a provider's calls, as it named them), recorded first in
    # the append that records the decision: one write, and never a call without its request.
    records: list[Payload] = Field(default_factory=list)


@dataclass(frozen=True)
class ToolOutcome:
    """A recorded request and the result recorded for it, to hand back to the executor."""

    request: ToolRequest
    result: ToolResult
    result_seq: int


class RemoteResource(BaseModel):
    """Something the executor holds outside Belay (a provider's session, environment, file)."""

    model_config = ConfigDict(frozen=True)

    kind: str
    id: str
    detail: str = ""


class Recorder(Protocol):
    def __call__(self, payloads: Sequence[Payload], *, durable: bool = True) -> Awaitable[list[Event]]: ...


@dataclass(frozen=True)
class ExecutorContext:
    session: AgentSession
    subagent: SubagentSpec
    store: EventStore  # for reading the record (a model context's tail); writes go through `record`
    artifacts: ArtifactStore  # where a remote deliverable's bytes are copied
    read_state: Callable[[], Awaitable[SessionState]]
    # The state as the attempt knows it (its last read plus its own appends since): no read.
    known_state: Callable[[], Awaitable[SessionState]]
    # Appends under the attempt's lease, as this subagent (`durable`: see `Attempt.record`).
    record: Recorder
    # The tools of the subagent's MCP servers, as this attempt listed them (belay.harness.mcp_tools).
    server_tools: Callable[[], list[ToolSchema]] = lambda: []


class Executor(Protocol):
    kind: str  # "self-hosted", or the managed executor's type

    async def start(self, state: SessionState) -> None:
        """Begin deciding for a subagent that no earlier attempt worked on."""
        ...

    async def resume(self, state: SessionState) -> None:
        """Go on after a lost attempt: settle what the executor holds against the record (a result
        recorded but never delivered is delivered; a call the record never saw is taken in)."""
        ...

    async def next_actions(self, state: SessionState) -> Decision:
        """The next calls, decided from the record (and the executor's own remote state)."""
        ...

    async def deliver_results(self, outcomes: Sequence[ToolOutcome]) -> None:
        """Hand the recorded results of the last decision's calls back to whoever decided."""
        ...

    async def tell(self, text: str, seq: int) -> None:
        """A person's words for a subagent whose turn ended without its deliverable (their message,
        or the request's change), recorded at `seq`: its next user turn. Given once, under a key
        derived from `seq`, whichever attempt gives it."""
        ...

    async def interrupt(self) -> None:
        """Stop deciding now; what was decided and recorded stays."""
        ...

    async def remote_resources(self) -> list[RemoteResource]:
        """What the executor holds outside Belay for this subagent."""
        ...

    async def close(self) -> None: ...


ExecutorFactory = Callable[[ExecutorContext], Executor]
