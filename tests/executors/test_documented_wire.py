"""The managed adapters rely on the providers' documented API only. With `OPENAI_BASE_URL` or
`ANTHROPIC_BASE_URL` pointed at a minimal server that speaks only the documented wire format (no
stand-in counters, fault hooks or extra routes; `documented_servers`), `belay run` of the example
reaches a recorded end with the review the plan writes, and the briefing names the endpoint."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.belay_cli import belay_command, completed, deliverables, read_events, remote_sessions
from tests.executors.documented_servers import AnthropicManagedServer, OpenAIAgentsServer, serving
from tests.executors.example import (
    ENVIRONMENT,
    SESSION,
    SUBAGENT,
    example_manifest,
    example_plan,
    review_sha256,
)
from tests.testenv.processes import dies_with_this_process

pytestmark = pytest.mark.slow

SERVERS = {"openai-agents": (OpenAIAgentsServer, "/v1"), "anthropic-managed": (AnthropicManagedServer, "")}


@pytest.mark.parametrize("executor", sorted(SERVERS))
async def test_belay_run_reaches_a_recorded_end_on_a_documented_server(executor: str, tmp_path: Path) -> None:
    server_class, path = SERVERS[executor]
    server = server_class(example_plan())
    base_url_variable, key_variable = ENVIRONMENT[executor]
    manifest = example_manifest(tmp_path / "manifest", executor)
    home = tmp_path / "home"
    async with serving(server.app(), path) as base_url:
        environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))},
            base_url_variable: base_url,
            key_variable: "sk-documented-only",
        }
        process = await asyncio.create_subprocess_exec(
            *belay_command(home, "run", str(manifest)),
            env=environment,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=dies_with_this_process(),
        )
        out, err = await asyncio.wait_for(process.communicate(), 300)
    events = await asyncio.to_thread(read_events, home, SESSION)
    assert process.returncode == 0, err.decode()[-2000:]
    assert completed(events)
    assert deliverables(events) == {"review.md": review_sha256()}
    assert list(remote_sessions(events)) == [SUBAGENT]
    assert len(server.sessions) == 1
    briefing = out.decode()
    assert (
        f"{executor} session {remote_sessions(events)[SUBAGENT]} at {base_url} ({base_url_variable})"
        in briefing
    )
