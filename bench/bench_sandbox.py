"""Local sandbox costs: start to healthy, replace, one tool call, and declared-state restore.

Restore throughput is measured side by side with the artifact store writing the same entries
straight into a directory (`materialize`), so the ratio is the price of going through the sandbox
server (HTTP over a Unix socket, hash checked on both ends, manifest read back).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from belay.journal.events import DeclaredArtifact
from belay.sandbox.local import LocalSandbox
from belay.sandbox.restore import restore
from belay.stores.filesystem import FilesystemArtifactStore
from bench.common import Figure

COMMAND = "python -m bench bench_sandbox"
START_RUNS = 10
CALL_RUNS = 200
RESTORE_FILES = 8
RESTORE_FILE_BYTES = 4 * 1024 * 1024
RESTORE_RUNS = 3


async def measure(base: Path) -> list[Figure]:
    starts, replaces = [], []
    sandbox = None
    for _ in range(START_RUNS):
        begin = time.perf_counter()
        sandbox = await LocalSandbox.start(base / "start", "bench", "none")
        starts.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        sandbox = await sandbox.replace()
        replaces.append(time.perf_counter() - begin)
        await sandbox.stop()
    isolated = sandbox.network_isolated if sandbox else False

    sandbox = await LocalSandbox.start(base / "calls", "bench", "none")
    try:
        await sandbox.client.call("write_file", {"path": "small.txt", "content": "x" * 1024})
        reads, commands = [], []
        for _ in range(CALL_RUNS):
            begin = time.perf_counter()
            await sandbox.client.call("read_file", {"path": "small.txt"})
            reads.append(time.perf_counter() - begin)
        for _ in range(CALL_RUNS // 4):
            begin = time.perf_counter()
            await sandbox.client.call("run_command", {"command": ["true"], "timeout_s": 10})
            commands.append(time.perf_counter() - begin)

        store = FilesystemArtifactStore(base / "artifacts")
        entries = []
        for index in range(RESTORE_FILES):
            ref = store.put(os.urandom(RESTORE_FILE_BYTES))
            entries.append(DeclaredArtifact(name=f"state/part-{index}.bin", sha256=ref.sha256, size=ref.size))
        total_mib = RESTORE_FILES * RESTORE_FILE_BYTES / (1024 * 1024)
        through_sandbox, direct = [], []
        for run in range(RESTORE_RUNS):
            begin = time.perf_counter()
            await restore(sandbox.client, store, entries)
            through_sandbox.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            await asyncio.to_thread(store.materialize, entries, base / f"direct-{run}")
            direct.append(time.perf_counter() - begin)
    finally:
        await sandbox.stop()

    sandbox_s = statistics.median(through_sandbox)
    direct_s = statistics.median(direct)
    return [
        Figure(
            "sandbox_start_median_s",
            statistics.median(starts),
            "s",
            COMMAND,
            f"LocalSandbox.start to a healthy server, median of {START_RUNS}; network_isolated={isolated}; "
            f"1-min load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
        ),
        Figure(
            "sandbox_replace_median_s",
            statistics.median(replaces),
            "s",
            COMMAND,
            f"stop (no process left) then start on a clean workspace, median of {START_RUNS}",
        ),
        Figure(
            "sandbox_read_file_median_ms",
            statistics.median(reads) * 1000,
            "ms",
            COMMAND,
            f"read_file of 1 KiB over the Unix socket, median of {CALL_RUNS}",
        ),
        Figure(
            "sandbox_run_command_median_ms",
            statistics.median(commands) * 1000,
            "ms",
            COMMAND,
            f"run_command ['true'], median of {CALL_RUNS // 4}",
        ),
        Figure(
            "sandbox_restore_mib_per_s",
            total_mib / sandbox_s,
            "MiB/s",
            COMMAND,
            f"{RESTORE_FILES} x {RESTORE_FILE_BYTES // (1024 * 1024)} MiB declared files, pushed and "
            f"verified, median of {RESTORE_RUNS}",
        ),
        Figure(
            "sandbox_restore_vs_materialize_ratio",
            sandbox_s / direct_s,
            "x",
            COMMAND,
            f"restore through the sandbox {sandbox_s:.3f}s vs store.materialize {direct_s:.3f}s "
            "of the same entries",
        ),
    ]


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="belay-bench-sandbox-") as directory:
        return asyncio.run(measure(Path(directory)))
