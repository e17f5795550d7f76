"""The executor each subagent of a session gets, by `spec.executor.type`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import Future

from belay.api.agentsession import AgentSession
from belay.executors import anthropic_managed, openai_agents
from belay.executors.endpoints import PROVIDERS, default_endpoint
from belay.executors.managed import ManagedExecutor
from belay.executors.provider import Endpoint
from belay.executors.self_hosted import SELF_HOSTED_TYPES, SelfHostedExecutor, model_factory_for
from belay.harness.executor import ExecutorContext, ExecutorFactory, ExecutorUnavailable

# Each managed type's executor; the provider's SDK is imported when its client is built.
MANAGED_EXECUTORS: dict[str, Callable[[ExecutorContext, Endpoint], ManagedExecutor]] = {
    "openai-agents": openai_agents.executor_for,
    "anthropic-managed": anthropic_managed.executor_for,
}


def executor_factory_for(
    session: AgentSession, endpoint: Endpoint | Future[Endpoint] | None = None
) -> ExecutorFactory:
    """The executor each subagent of this session gets, by `spec.executor.type`. A managed
    executor talks to `endpoint`, else to what the SDK's standard variables configure. A future
    endpoint is a local stand-in still starting: each executor waits for it when it is built (in
    its own thread), so the attempt starts beside it."""
    executor_type = session.spec.executor.type
    if executor_type in SELF_HOSTED_TYPES:
        models = model_factory_for(session)
        compaction_lock = asyncio.Lock()  # one summary at a time for all the subagents
        return lambda ctx: SelfHostedExecutor(ctx, models(ctx), compaction_lock)
    managed = MANAGED_EXECUTORS.get(executor_type)
    if managed is None:
        # Validation refuses every type not implemented here, so this is a programming error.
        raise ValueError(f"executor type {executor_type!r} has no executor")
    variables = PROVIDERS[executor_type]

    def start(ctx: ExecutorContext) -> ManagedExecutor:
        if isinstance(endpoint, Future):
            try:
                where = endpoint.result()
            except (OSError, RuntimeError) as error:  # the stand-in did not start
                raise ExecutorUnavailable("ProviderUnavailable", f"{executor_type}: {error}") from None
        else:
            where = endpoint or default_endpoint(executor_type, os.environ)
        try:
            return managed(ctx, where)
        except Exception as error:  # the SDK refuses to build a client: no key configured
            raise ExecutorUnavailable(
                "ProviderUnavailable",
                f"{executor_type}: {error} (set {variables.api_key}, or {variables.base_url} for "
                "another server that speaks its API)",
            ) from None

    return start


__all__ = ["Endpoint", "ExecutorContext", "ExecutorFactory", "executor_factory_for"]
