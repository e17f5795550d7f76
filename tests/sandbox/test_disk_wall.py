"""The disk wall bounds disk: every path a local sandbox can write is on one filesystem whose size
is the disk figure, so a burst of writes (`fallocate`, `dd`, faster than any measure) stops at the
figure with the writer's own ENOSPC, wherever it writes; and a sparse file counts at its apparent
size, what a checkpoint would store and a restore write. Real sandboxes, a 16 MiB figure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from belay.api.resources import SandboxResources
from belay.sandbox.client import WorkspaceRefused
from belay.sandbox.local import LocalSandbox

FIGURE_MIB = 16
MIB = 1024 * 1024
# What a filesystem of the figure's size may hold beyond it: its own bookkeeping, never a burst.
SLACK_BYTES = MIB
# 40 files of 15 MiB: each under RLIMIT_FSIZE (the figure), 600 MiB together, written in well
# under the second between two of the server's measures.
BURSTS = {
    "fallocate": "for i in $(seq 1 40); do fallocate -l 15M {dir}/burst-$i; done",
    "dd": "for i in $(seq 1 40); do dd if=/dev/zero of={dir}/burst-$i bs=1M count=15 status=none; done",
}
# Every writable place a command could name: the workspace, /tmp, the server's old socket
# directory, and the root and /run (made by the sandbox's setup).
PLACES = ["/workspace", "/tmp", "/run/belay", "/run", "/"]


@pytest.fixture
async def walled(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    resources = SandboxResources(disk_mib=FIGURE_MIB, command_seconds=60)
    started = await LocalSandbox.start(tmp_path / "sandboxes", "worker", "none", resources=resources)
    try:
        yield started
    finally:
        await started.stop()


async def run(sandbox: LocalSandbox, command: str) -> dict[str, Any]:
    return await sandbox.client.call("run_command", {"command": command, "timeout_s": 60})


# Run inside the sandbox: the bytes the files under the places a command can write hold on disk
# (allocated blocks), whatever filesystem each is on.
DISK_USED = r"""
import os, sys
seen, total = set(), 0
for top in ("/workspace", "/tmp", "/run"):
    for directory, _dirs, files in os.walk(top):
        for name in files:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
print(total)
"""


async def disk_used(sandbox: LocalSandbox) -> int:
    answer = await sandbox.client.call("run_command", {"command": ["python3", "-c", DISK_USED]})
    assert answer["ok"], answer
    return int(answer["output"]["stdout"])


@pytest.mark.parametrize("tool", sorted(BURSTS))
@pytest.mark.parametrize("place", ["/workspace", "/tmp", "/run/belay"])
async def test_a_burst_of_writes_stops_at_the_disk_figure(
    walled: LocalSandbox, place: str, tool: str
) -> None:
    command = f"mkdir -p {place}; " + BURSTS[tool].format(dir=place) + "; echo done"
    answer = await run(walled, command)
    output = answer["output"]
    used = await disk_used(walled)
    assert used <= FIGURE_MIB * MIB + SLACK_BYTES, f"{used / MIB:.1f} MiB after a burst in {place}: {answer}"
    # The writer saw the wall as its own error (or was refused the place altogether), and the
    # command went on to its end: nothing wedged.
    assert "done" in output["stdout"], answer
    assert any(
        refusal in output["stderr"]
        for refusal in ("No space left on device", "Read-only file system", "Permission denied")
    ), answer
    # The sandbox goes on: once the burst's files are gone there is room again.
    assert (await run(walled, f"rm -f {place}/burst-*; head -c 1M /dev/zero > room; echo ok"))["ok"]


async def test_every_writable_path_is_on_the_sandbox_disk(walled: LocalSandbox) -> None:
    """No writable place outside the one filesystem of the figure's size, whatever its name."""
    probe = (
        "import json, os\n"
        f"places = {PLACES!r}\n"
        "disk = os.stat('/workspace').st_dev\n"
        "found = {}\n"
        "for place in places:\n"
        "    if os.path.isdir(place) and os.access(place, os.W_OK):\n"
        "        try:\n"
        "            with open(os.path.join(place, '.probe'), 'w') as handle: handle.write('x')\n"
        "            found[place] = os.stat(place).st_dev == disk\n"
        "        except OSError:\n"
        "            pass\n"
        "print(json.dumps(found))\n"
    )
    answer = await walled.client.call("run_command", {"command": ["python3", "-c", probe]})
    assert answer["ok"], answer
    writable = json.loads(answer["output"]["stdout"])
    assert set(writable) == {"/workspace", "/tmp"}, writable
    assert all(writable.values()), f"writable places off the sandbox's disk: {writable}"


async def test_a_sparse_file_counts_at_its_apparent_size(walled: LocalSandbox) -> None:
    """60 sparse files of 15 MiB hold almost no blocks, but a checkpoint would store (and a
    restore write) 900 MiB: the wall counts them at that size, and says so."""
    answer = await run(walled, "for i in $(seq 1 60); do truncate -s 15M sparse-$i; done; sleep 3")
    assert answer["ok"] is False, answer
    assert answer["output"]["wall"] == "disk", answer
    assert f"workspace disk limit {FIGURE_MIB} MiB reached" in answer["error"], answer
    # Counted, not only reported: a write through the harness's own call is refused now.
    refused = await walled.client.call("write_file", {"path": "more.txt", "content": "x"})
    assert refused["ok"] is False and f"{FIGURE_MIB} MiB" in refused["error"], refused
    assert (await run(walled, "rm sparse-*; echo gone"))["ok"]
    assert (await walled.client.call("write_file", {"path": "more.txt", "content": "x"}))["ok"]


async def test_a_restore_needs_room_for_its_files_once(walled: LocalSandbox) -> None:
    """A checkpoint of most of the figure can be restored: a file put takes its own size on the
    sandbox's disk, never twice (held aside while its hash is checked, then written again)."""
    data = b"r" * (12 * MIB)
    entry = await walled.client.put_file("restored.bin", data, hashlib.sha256(data).hexdigest())
    assert entry.size == len(data)
    assert (walled.files / "restored.bin").stat().st_size == len(data)
    # A second one does not fit: refused whole, and the first stays.
    with pytest.raises(WorkspaceRefused) as refusal:
        await walled.client.put_file("second.bin", data, hashlib.sha256(data).hexdigest())
    assert refusal.value.rule == "quota", refusal.value
    assert sorted(path.name for path in walled.files.iterdir()) == ["restored.bin"]


async def test_declared_files_that_could_not_be_restored_are_refused(walled: LocalSandbox) -> None:
    """Sparse files can declare more than the disk figure while holding almost nothing: the
    manifest a checkpoint reads refuses them (`quota`), naming the file that passes the figure,
    rather than storing what no sandbox of this figure could take back."""
    await run(walled, "for i in 1 2 3; do truncate -s 10M part-$i; done")
    with pytest.raises(WorkspaceRefused) as refusal:
        await walled.client.manifest(["part-1", "part-2", "part-3"])
    assert (refusal.value.rule, refusal.value.path) == ("quota", "part-2"), refusal.value
    [entry] = await walled.client.manifest(["part-1"])
    assert entry.size == 10 * MIB
