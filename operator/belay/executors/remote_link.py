"""One subagent's link to its remote session at a provider: what names the session (its metadata,
the record's tag, the keys derived from the record), and every request to the provider, retried
where it may be and recorded where it fails. `ManagedExecutor` (`belay.executors.managed`) builds
on it.

No credential is ever recorded: the endpoint is the base URL without user info.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from belay.executors.provider import (
    ManagedProvider,
    RemoteGone,
    RemoteRefused,
    RemoteTransient,
    Snapshot,
    classify,
    translated,
)
from belay.harness.executor import ExecutorContext, ExecutorFailed, ExecutorUnavailable
from belay.journal.events import Remote, RemoteKind
from belay.journal.state import SessionState

METADATA_SESSION = "belay_session"
METADATA_SUBAGENT = "belay_subagent"
METADATA_RECORD = "belay_record"

# Tries of one request before the provider counts as unavailable (the SDK retries inside each
# try what the API marks safe to retry).
TRIES = 5
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 4.0)

T = TypeVar("T")


class RemoteLost(ExecutorFailed):
    """The remote session is gone (404), failed or was terminated; recorded as `failed`. The
    executor replaces it (`ManagedExecutor.replace`)."""


class RemoteLink:
    """One subagent's remote session at one provider, as far as naming it and asking it go."""

    def __init__(
        self,
        context: ExecutorContext,
        provider: ManagedProvider,
        connection_errors: tuple[type[BaseException], ...],
    ) -> None:
        self.context = context
        self.provider = provider
        self.kind = provider.kind
        self.connection_errors = connection_errors
        self.sub = context.subagent.name
        self.remote_id = ""
        self.record_tag = ""
        self.moves = 0  # how many times the record moved the session to another executor

    # ---- the remote session's names

    async def close_lost(self, remote_id: str) -> str:
        """Close a lost remote session at the provider; what became of it, for the record."""
        try:
            await translated(self.provider.close_session(remote_id), self.connection_errors)
        except RemoteGone:
            return "already gone at the provider"
        except (RemoteRefused, RemoteTransient) as refused:
            return f"not closed: {refused}"
        return "closed at the provider"

    async def find_replacement(self, metadata: dict[str, str], state: SessionState) -> str | None:
        """A replacement an earlier attempt created and did not record; none when what it would
        have been made with (Anthropic's agent) is gone as well."""
        try:
            return await self.provider.find_session(metadata, self.resources(state))
        except Exception as error:
            if isinstance(classify(error, self.connection_errors), RemoteGone):
                return None
            raise

    async def record_resource(self, resource: str, resource_id: str) -> None:
        await self.context.record(
            [
                Remote(
                    kind=RemoteKind.RESOURCE,
                    executor=self.kind,
                    subagent=self.sub,
                    endpoint=self.provider.endpoint.label,
                    resource=resource,
                    resource_id=resource_id,
                )
            ]
        )

    def resources(self, state: SessionState, without: Collection[str] = ()) -> dict[str, str]:
        prefix = f"{self.sub}/"
        return {
            name.removeprefix(prefix): remote_id
            for name, remote_id in state.remote_resources.items()
            if name.startswith(prefix) and remote_id not in without
        }

    def metadata(self, generation: int = 1) -> dict[str, str]:
        """What names this subagent's remote session of this record; a replacement (`generation`
        2 on) apart from the ones before it, so that looking for one never finds another."""
        tag = self.record_tag if generation == 1 else f"{self.record_tag}.{generation}"
        if self.moves:  # the sessions made after the n-th move to another executor, apart again
            tag += f".m{self.moves}"
        return {
            METADATA_SESSION: self.context.session.session_id,
            METADATA_SUBAGENT: self.sub,
            METADATA_RECORD: tag,
        }

    async def tag(self) -> str:
        """Names this record apart from any other of the same session name (another home, a
        re-created AgentSession): its first event's time."""
        first = await self.context.store.read(self.context.session.session_id, 1, 1)
        stamp = first[0].created_at.isoformat() if first else ""
        return hashlib.sha256(f"{self.context.session.session_id}/{stamp}".encode()).hexdigest()[:16]

    def key(self, seq: int) -> str:
        return f"belay-{self.context.session.session_id}-{self.record_tag}-{seq}"

    async def look(self) -> Snapshot:
        return await self.retrying("read the remote session", lambda: self.provider.snapshot(self.remote_id))

    # ---- talking to the provider

    async def retrying(self, what: str, request: Callable[[], Awaitable[T]]) -> T:
        """A request the provider may take again safely (a read, a keyed post, a post checked
        against the remote state first), tried until it is answered or TRIES have failed."""
        for attempt in range(TRIES):
            try:
                return await translated(request(), self.connection_errors)
            except RemoteTransient as failure:
                if attempt + 1 == TRIES:
                    await self.unavailable(f"{what}: {failure} ({TRIES} tries)")
                await self.note_interruption(f"{what}: {failure}; tried again")
                await asyncio.sleep(BACKOFF_S[attempt])
            except RemoteRefused as refused:
                await self.unavailable(f"{what}: the provider refused: {refused}")
            except RemoteGone as gone:
                await self.fail(
                    "RemoteSessionDeleted", f"the remote session {self.remote_id} no longer exists ({gone})"
                )
        raise AssertionError("unreachable")

    async def note_interruption(self, detail: str) -> None:
        await self.context.record([self.remote(RemoteKind.INTERRUPTED, detail=detail)])

    async def unavailable(self, detail: str) -> None:
        await self.note_interruption(detail)
        raise ExecutorUnavailable(
            "ProviderUnavailable", f"{self.kind} at {self.provider.endpoint.label}: {detail}"
        )

    async def fail(self, reason: str, detail: str) -> None:
        """The remote session cannot go on: recorded, then `RemoteLost`, which the protocol's
        methods answer by replacing it (and which fails the session wherever it is not)."""
        await self.context.record([self.remote(RemoteKind.FAILED, detail=detail)])
        raise RemoteLost(reason, f"{self.sub}: {detail}")

    def remote(self, kind: RemoteKind, **fields: Any) -> Remote:
        return Remote(
            kind=kind,
            executor=self.kind,
            subagent=self.sub,
            remote_session_id=self.remote_id,
            endpoint=self.provider.endpoint.label,
            **fields,
        )
