"""Executors: whoever decides the next action, each an implementation of the harness's
`belay.harness.executor.Executor`.

One module per executor; no provider type appears outside its module. `self_hosted` is Belay's own
model loop; `openai_agents` and `anthropic_managed` are providers' managed agent sessions, over
what they share in `managed`; `factory` gives a session's subagents their executor.

This package's own module imports nothing, so that a stand-in (`belay.executors.standins`), a
process of its own, loads only what it serves with.
"""
