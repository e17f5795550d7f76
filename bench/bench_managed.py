"""The managed executor's overhead: one OpenAI Agents session of 20 tool calls, driven through
Belay's adapter (`executor.type: openai-agents`) and driven by the `openai` SDK's own helper
(`client.beta.agents.sessions.stream(..., tool_handlers=...)`), on the same stand-in; and the same
20 calls on the self-hosted executor (`scripted`: no provider at all), for scale.

Both sides run in this process against one stand-in process (`python -m
belay.executors.standins.openai_agents`), whose remote agent asks for the same 20 calls, one at a
time: `update_plan` running, 6 x (`write_file`, `read_file`, `run_command`), `update_plan` done.
Each side has a sandbox of its own, started before the clock starts and stopped after it stops,
and makes the same sandbox calls for them: the 20 tool calls, the inputs' revision at the start,
and at the end the checkpoint's (the listing, the manifest, each declared file read, the git
revision and its patch); both sides fetch the session's published files from the provider.

- **Adapter**: timed is `Harness.run()`, the attempt `belay run` makes (without starting the
  sandbox): the lease, the record (SQLite, as `belay run` keeps it), the executor's client, the
  remote session created, each call recorded with its request, its run in the sandbox (redacted),
  its result recorded and delivered under its key (the delivery recorded with the next call), the
  inputs' and the checkpoint's revisions (the declared files stored, the git revision and its
  patch), the remote outputs copied to the artifact store, the end recorded.
- **Self-hosted**: timed is `Harness.run()` as for the adapter, with `executor.type: scripted`
  following the plan the stand-in follows: the same calls, recorded the same way, no provider.
- **Helper**: timed is the SDK client created, the session created (`environment` `openai_hosted`,
  which the stand-in starts idle, as the helper needs), the inputs' revision, `sessions.stream`
  with one handler per tool that makes the adapter's sandbox call for it (the `update_plan`
  handlers: nothing, then the checkpoint's sandbox calls) until the turn's final result, the
  session's artifacts listed and downloaded, and the client closed. Nothing is recorded: what the
  adapter does beyond this (the record, the lease, the artifact store, settling) is its overhead.

The sides take turns (the first of each round rotates too) after one untimed warm-up of each, so
the machine's load falls on all alike; the report gives the median of each side, their spread
and the load average during the run. `managed_adapter_overhead_ratio` is adapter over helper
(goal at most 1.2); `managed_over_self_hosted_ratio` is adapter over self-hosted (no goal: it is
what a provider's round trips cost against a model that answers at once).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from belay.api.agentsession import AgentSession, parse_manifest
from belay.executors.endpoints import STANDIN_KEY
from belay.executors.factory import executor_factory_for
from belay.executors.provider import Endpoint, endpoint_label
from belay.executors.seeding import result_text
from belay.executors.self_hosted import initial_model_id
from belay.harness.checkpoints import inputs_checkpoint_id
from belay.harness.declared import declared_paths
from belay.harness.loop import Harness
from belay.harness.revision import make_revision
from belay.harness.tools import tool_schema
from belay.journal.state import fold
from belay.journal.tools import TOOLS
from belay.local.runtime import LocalHome, record_request
from belay.local.standin_process import StandinProcess, provider_problems
from belay.sandbox.local import LocalSandbox
from bench.common import Figure

COMMAND = "python -m bench bench_managed"
REPEATS = int(os.environ.get("BELAY_BENCH_MANAGED_ROUNDS", "9"))
SUBAGENT = "worker"
ROUNDS = 6  # write, read, run: 3 calls a round, plus update_plan running and done: 20 calls
CALLS = 3 * ROUNDS + 2
DECLARED = ["notes/*"]  # the subagent's declared files: what its checkpoint keeps
GOAL = 1.2


def plan() -> dict[str, Any]:
    actions: list[dict[str, Any]] = []
    for index in range(ROUNDS):
        path = f"notes/n{index}.txt"
        actions += [
            {"tool": "write_file", "arguments": {"path": path, "content": f"line {index}\n" * 40}},
            {"tool": "read_file", "arguments": {"path": path}},
            {"tool": "run_command", "arguments": {"command": f"wc -l {path}"}},
        ]
    step = {"id": "work", "title": "Write, read back and count six notes", "actions": actions}
    return {"subagents": {SUBAGENT: {"steps": [step]}}}


def session_named(name: str, executor: dict[str, Any]) -> AgentSession:
    return parse_manifest(
        {
            "apiVersion": "belay.dev/v1alpha1",
            "kind": "AgentSession",
            "metadata": {"name": name},
            "spec": {
                "request": {"goal": "Write, read back and count six notes."},
                "executor": executor,
                "subagents": [{"name": SUBAGENT, "networkProfile": "none", "declared": DECLARED}],
            },
        }
    )


class KeptSandbox:
    """A sandbox started before the clock, handed to the harness, stopped after the clock."""

    def __init__(self, sandbox: LocalSandbox) -> None:
        self.sandbox = sandbox
        self.name = sandbox.name
        self.endpoint = sandbox.endpoint
        self.pid = sandbox.pid
        self.instance = sandbox.instance
        self.network_isolated = sandbox.network_isolated
        self.walls = getattr(sandbox, "walls", "")

    @property
    def client(self) -> Any:
        return self.sandbox.client

    async def stop(self) -> None:
        pass  # the benchmark stops it once the clock has stopped


class KeptSandboxes:
    def __init__(self, sandbox: KeptSandbox) -> None:
        self.sandbox = sandbox

    async def start(self, subagent: Any, replacing: Any = None) -> KeptSandbox:
        if replacing is not None:
            raise RuntimeError("the benchmark's sandbox was lost")
        return self.sandbox


async def new_sandbox(directory: Path) -> LocalSandbox:
    return await LocalSandbox.start(directory, SUBAGENT, "none")


async def through_adapter(directory: Path, name: str, endpoint: Endpoint) -> float:
    return await through_harness(
        directory, session_named(name, {"type": "openai-agents", "model": "gpt-5"}), endpoint
    )


async def on_self_hosted(directory: Path, name: str, endpoint: Endpoint) -> float:
    plan_file = directory.parent / "plan.yaml"  # the one the stand-in follows, written by run()
    return await through_harness(
        directory, session_named(name, {"type": "scripted", "plan": str(plan_file)}), endpoint
    )


async def through_harness(directory: Path, session: AgentSession, endpoint: Endpoint) -> float:
    """`Harness.run()` of `session` (its executor the one its spec names) until it completes."""
    home = LocalHome(directory / "home")
    store = home.open_event_store()
    sandbox = await new_sandbox(directory / "sandboxes")
    try:
        await record_request(store, session)
        harness = Harness(
            session=session,
            store=store,
            artifacts=home.open_artifact_store(),
            sandboxes=KeptSandboxes(KeptSandbox(sandbox)),
            executors=executor_factory_for(session, endpoint),
            holder="bench",
            model_id=initial_model_id(session),
        )
        started = time.perf_counter()
        result = await harness.run()
        elapsed = time.perf_counter() - started
        if not result.completed:
            raise RuntimeError(f"{session.metadata.name} did not complete: {result.detail}")
        state = fold(await store.read(session.session_id))
        done = [o for o in state.operations.values() if o.result_seq is not None]
        if len(done) != CALLS:
            raise RuntimeError(f"{session.metadata.name} recorded {len(done)} results, not {CALLS}")
        return elapsed
    finally:
        await store.close()
        await sandbox.stop()


async def checkpoint_calls(sandbox: LocalSandbox, parent: str) -> None:
    """The sandbox calls of the harness's checkpoint (belay.harness.harness_tools.checkpoint)."""
    listing = await sandbox.client.call("list_files", {"path": "."})
    paths = declared_paths((listing.get("output") or {}).get("files", []), DECLARED)
    entries = await sandbox.client.manifest(paths) if paths else []
    for entry in entries:
        await sandbox.client.get_file(entry.name)
    await make_revision(sandbox.client, [e.name for e in entries], f"{SUBAGENT}/work", parent=parent)


def sandbox_handlers(
    sandbox: LocalSandbox, inputs_revision: str
) -> dict[str, Callable[[dict[str, Any]], Awaitable[str]]]:
    """What the adapter's tool runtime asks the sandbox for each tool, and nothing more."""

    async def in_sandbox(tool: str, arguments: dict[str, Any]) -> str:
        response = await sandbox.client.call(tool, arguments)
        if not response.get("ok", False):
            raise RuntimeError(f"{tool}: {response.get('error')}")
        return result_text(response.get("output"))

    async def update_plan(arguments: dict[str, Any]) -> str:
        if arguments.get("status") == "done":
            await checkpoint_calls(sandbox, inputs_revision)
        return result_text({"step": arguments.get("step"), "status": arguments.get("status")})

    handlers: dict[str, Callable[[dict[str, Any]], Awaitable[str]]] = {
        tool: partial(in_sandbox, tool) for tool in ("write_file", "read_file", "run_command")
    }
    handlers["update_plan"] = update_plan
    return handlers


async def through_helper(directory: Path, name: str, endpoint: Endpoint) -> float:
    from openai import AsyncOpenAI

    sandbox = await new_sandbox(directory / "sandboxes")
    tools: list[Any] = [
        {
            "type": "function",
            "name": s.name,
            "description": s.description,
            "parameters": tool_schema(s).parameters,
        }
        for s in TOOLS.values()
    ]
    try:
        started = time.perf_counter()
        client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
        sessions = client.beta.agents.sessions
        try:
            inputs, _ = await make_revision(sandbox.client, [], inputs_checkpoint_id(SUBAGENT))
            handlers = sandbox_handlers(sandbox, inputs.revision)
            session = await sessions.create(
                environment={"type": "openai_hosted"},
                agent={"model": "gpt-5", "instructions": f"You are {SUBAGENT}.", "tools": tools},
                metadata={"belay_subagent": SUBAGENT, "bench": name},
            )
            async with sessions.stream(
                session.id, input="Write, read back and count six notes.", tool_handlers=handlers
            ) as stream:
                result = await stream.get_final_result()
            async for artifact in sessions.artifacts.list(session.id, order="asc"):
                await sessions.artifacts.content(artifact.id, session_id=session.id)
        finally:
            await client.close()
        elapsed = time.perf_counter() - started
        if not result.output_text:
            raise RuntimeError("the helper's session ended without a final answer")
        return elapsed
    finally:
        await sandbox.stop()


async def measure(base: Path, standin: StandinProcess) -> dict[str, Any]:
    endpoint = Endpoint(standin.base_url, STANDIN_KEY, endpoint_label(standin.base_url, "the stand-in"))
    sides: dict[str, Callable[[Path, str, Endpoint], Awaitable[float]]] = {
        "adapter": through_adapter,
        "helper": through_helper,
        "self-hosted": on_self_hosted,
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    loads = [os.getloadavg()[0]]
    names = list(sides)
    for round_ in range(REPEATS + 1):  # round 0 warms up each side (imports, first connections)
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for side in order:
            elapsed = await sides[side](base / f"{side}-{round_}", f"bench-{side}-{round_}", endpoint)
            if round_ > 0:
                times[side].append(elapsed)
        loads.append(os.getloadavg()[0])
    return {"times": times, "loads": loads}


def run() -> list[Figure]:
    base = Path(tempfile.mkdtemp(prefix="belay-bench-managed-"))
    plan_file = base / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan(), sort_keys=False))
    standin = StandinProcess("openai-agents", plan_file, base / "standin")
    try:
        measured = asyncio.run(measure(base, standin))
        problems = provider_problems(standin.stats(), subagents=2 * (REPEATS + 1))
        if problems:
            raise RuntimeError("the stand-in saw what it should not: " + "; ".join(problems))
    finally:
        standin.stop()
        shutil.rmtree(base, ignore_errors=True)
    adapter, helper = measured["times"]["adapter"], measured["times"]["helper"]
    self_hosted = measured["times"]["self-hosted"]
    loads = measured["loads"]
    ratio = statistics.median(adapter) / statistics.median(helper)

    def spread(samples: list[float]) -> str:
        return (
            f"median {statistics.median(samples):.3f} s (min {min(samples):.3f}, max {max(samples):.3f}; "
            f"{', '.join(f'{s:.3f}' for s in samples)})"
        )

    detail = (
        f"{CALLS} tool calls, {REPEATS} rounds taking turns after a warm-up: through the adapter on the "
        f"OpenAI Agents stand-in (Harness.run, SQLite record) {spread(adapter)}; through the SDK helper "
        f"on the same stand-in (sessions.stream with tool_handlers, no record) {spread(helper)}; on the "
        f"self-hosted executor (scripted, Harness.run, SQLite record) {spread(self_hosted)}; the same "
        f"sandbox calls on every side (the tool calls, the inputs' and the checkpoint's git revisions), "
        f"and the published files fetched on both provider sides, sandbox start excluded; 1-min load "
        f"average {min(loads):.1f} to "
        f"{max(loads):.1f} on {os.cpu_count()} cores"
    )
    return [
        Figure(
            key="managed_adapter_overhead_ratio",
            value=ratio,
            unit="x",
            command=COMMAND,
            detail=detail,
            goal=f"<= {GOAL}",
        ),
        Figure(
            key="managed_over_self_hosted_ratio",
            value=statistics.median(adapter) / statistics.median(self_hosted),
            unit="x",
            command=COMMAND,
            detail=detail,
        ),
    ]


if __name__ == "__main__":
    print(json.dumps([f.__dict__ for f in run()], indent=1))
