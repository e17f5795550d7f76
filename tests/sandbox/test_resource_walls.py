"""Resource walls: a fork bomb, a memory bomb, a disk filler and a command that never exits each
end as a failed call naming the wall and its figure, what the command printed and wrote is kept,
and the sandbox answers the next call. Small figures keep the machine responsive."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from belay.api.resources import SandboxResources
from belay.sandbox.local import LocalSandbox

SMALL = SandboxResources(processes=64, memory_mib=128, disk_mib=16, command_seconds=2)
MIB = 1024 * 1024


@pytest.fixture
async def walled(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    """A sandbox with small figures; stopped (its PID namespace with it) even when a test fails."""
    started = await LocalSandbox.start(tmp_path / "sandboxes", "worker", "none", resources=SMALL)
    try:
        yield started
    finally:
        await started.stop()


async def run(sandbox: LocalSandbox, command: str, timeout_s: int = 20) -> dict[str, Any]:
    return await sandbox.client.call("run_command", {"command": command, "timeout_s": timeout_s})


async def still_answers(sandbox: LocalSandbox) -> None:
    """The sandbox goes on: a plain command runs, and nothing of the tripped one is left running."""
    answer = await run(sandbox, "echo still here; ls /proc | grep -c '^[0-9]'")
    assert answer["ok"], answer
    lines = answer["output"]["stdout"].split()
    assert lines[:2] == ["still", "here"], answer
    # bwrap, the server, this shell, ls and grep: a handful, never the bomb's dozens.
    assert int(lines[-1]) < 16, answer


def assert_tripped(answer: dict[str, Any], wall: str, figure: str) -> None:
    assert answer["ok"] is False, answer
    assert answer["output"]["wall"] == wall, answer
    assert figure in answer["error"], answer
    assert figure in answer["output"]["stderr"], answer


async def test_a_fork_bomb_is_a_failed_call_at_the_process_limit(walled: LocalSandbox) -> None:
    started = time.monotonic()
    answer = await run(walled, "echo before; bomb() { bomb | bomb & }; bomb; sleep 30")
    assert_tripped(answer, "processes", "process limit 64 reached")
    assert answer["output"]["stdout"].startswith("before"), answer
    # Stopped by the process wall, well before its 2 s time limit would.
    assert time.monotonic() - started < 10
    await still_answers(walled)


async def test_a_refused_fork_names_the_process_wall_even_when_the_time_runs_out(
    walled: LocalSandbox,
) -> None:
    """bash retries a refused fork with growing sleeps, so a command the kernel refused a process
    can sit until its time limit while the server's own count stays low (as root, RLIMIT_NPROC
    counts every local sandbox's processes). The refusal is the wall it ran into, not the time.
    Here the command lowers its own limit below what its uid already runs: a real refusal."""
    answer = await run(walled, "echo before; exec bash -c 'ulimit -u 1; sleep 30 & wait'", timeout_s=600)
    assert "Resource temporarily unavailable" in answer["output"]["stderr"], answer
    assert_tripped(answer, "processes", "process limit 64 reached")
    await still_answers(walled)


async def test_a_memory_bomb_is_a_failed_call_at_the_memory_limit(walled: LocalSandbox) -> None:
    grows = "python3 -c 'x = []\nwhile True: x.append(b\"m\" * (4 << 20))'"
    assert_tripped(await run(walled, grows), "memory", "memory limit 128 MiB reached")
    at_once = "python3 -c 'x = b\"m\" * (512 << 20)'"
    assert_tripped(await run(walled, at_once), "memory", "memory limit 128 MiB reached")
    await still_answers(walled)


async def test_a_disk_filler_is_a_failed_call_at_the_disk_limit_and_its_files_stay(
    walled: LocalSandbox,
) -> None:
    await walled.client.call("write_file", {"path": "notes.txt", "content": "kept\n"})
    answer = await run(walled, "for i in 1 2 3 4 5 6; do head -c 4M /dev/zero > fill-$i; done; sleep 30")
    assert_tripped(answer, "disk", "workspace disk limit 16 MiB reached")
    assert (walled.files / "notes.txt").read_text() == "kept\n"
    assert (walled.files / "fill-1").stat().st_size == 4 * MIB
    # Full: a write through the harness's own call is refused too, not half written.
    refused = await walled.client.call("write_file", {"path": "more.txt", "content": "x" * MIB})
    assert refused["ok"] is False and "16 MiB" in refused["error"], refused
    assert not (walled.files / "more.txt").exists()
    # Removing files is allowed, and then the sandbox has room again.
    assert (await run(walled, "rm fill-*"))["ok"]
    assert (await walled.client.call("write_file", {"path": "more.txt", "content": "x" * MIB}))["ok"]
    await still_answers(walled)


async def test_one_big_file_stops_at_the_disk_limit(walled: LocalSandbox) -> None:
    answer = await run(walled, "head -c 64M /dev/zero > big; echo wrote")
    assert_tripped(answer, "disk", "workspace disk limit 16 MiB reached")
    assert (walled.files / "big").stat().st_size <= 16 * MIB
    await still_answers(walled)


async def test_the_sandbox_tmp_counts_against_the_disk_limit(walled: LocalSandbox) -> None:
    answer = await run(walled, "for i in 1 2 3 4 5 6; do head -c 4M /dev/zero > /tmp/fill-$i; done; sleep 30")
    assert_tripped(answer, "disk", "workspace disk limit 16 MiB reached")
    await still_answers(walled)


async def test_a_command_that_never_exits_is_a_failed_call_at_the_time_limit(walled: LocalSandbox) -> None:
    started = time.monotonic()
    # The call asks for ten minutes; the manifest's figure is 2 s.
    answer = await run(walled, "echo started; sleep 1000", timeout_s=600)
    assert_tripped(answer, "time", "command time limit 2 s reached")
    assert answer["output"]["stdout"] == "started\n"
    assert time.monotonic() - started < 10
    await still_answers(walled)


async def test_a_timeout_below_the_figure_is_the_calls_own_not_a_wall(walled: LocalSandbox) -> None:
    answer = await run(walled, "sleep 1000", timeout_s=1)
    assert answer["ok"] is True and answer["output"]["timed_out"] is True, answer
    assert "wall" not in answer["output"]
