"""Executors: whoever decides the next action, each behind `belay.executors.base.Executor`.

One module per executor; no provider type appears outside its module.
"""

from __future__ import annotations

from belay.api.agentsession import AgentSession
from belay.executors.base import ExecutorContext, ExecutorFactory


def executor_factory_for(session: AgentSession) -> ExecutorFactory:
    """The executor each subagent of this session gets, by `spec.executor.type`."""
    from belay.executors.self_hosted import SELF_HOSTED_TYPES, SelfHostedExecutor, model_factory_for

    executor_type = session.spec.executor.type
    if executor_type in SELF_HOSTED_TYPES:
        models = model_factory_for(session)
        return lambda ctx: SelfHostedExecutor(ctx, models(ctx))
    # Validation refuses every type not implemented here, so this is a programming error.
    raise ValueError(f"executor type {executor_type!r} has no executor")


__all__ = ["ExecutorContext", "ExecutorFactory", "executor_factory_for"]
