"""The disk wall's figures (docs/security.md, "Resource walls"): a burst of 40 files of 15 MiB by
`fallocate` and by `dd` in each place a command might write, and 60 sparse files of 15 MiB, in a
local sandbox whose disk figure is 16 MiB; what each leaves on disk (`du -s -B1`).

    .venv/bin/python -m bench.disk_wall
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from belay.api.resources import SandboxResources
from belay.sandbox.local import LocalSandbox

MIB = 1024 * 1024
USED = "du -s -B1 /workspace /tmp 2>/dev/null | awk '{s+=$1} END {print s}'"
BURSTS = {
    "fallocate": "fallocate -l 15M {place}/b-$i",
    "dd": "dd if=/dev/zero of={place}/b-$i bs=1M count=15 status=none",
}


async def main() -> None:
    with tempfile.TemporaryDirectory() as base:
        resources = SandboxResources(disk_mib=16, command_seconds=60)
        sandbox = await LocalSandbox.start(Path(base), "bench", "none", resources=resources)
        try:
            for place in ("/workspace", "/tmp", "/run/belay"):
                for tool, write in BURSTS.items():
                    burst = f"mkdir -p {place}; for i in $(seq 1 40); do {write.format(place=place)}; done"
                    answer = await sandbox.client.call(
                        "run_command", {"command": f"{burst} 2>/dev/null; {USED}", "timeout_s": 60}
                    )
                    used = int(answer["output"]["stdout"].split()[-1])
                    wall = answer["output"].get("wall")
                    print(f"{tool} 40 x 15 MiB in {place}: {used / MIB:.1f} MiB on disk, wall {wall}")
                    await sandbox.client.call("run_command", {"command": f"rm -rf {place}/b-*"})
            sparse = "for i in $(seq 1 60); do truncate -s 15M s-$i; done; " + USED
            answer = await sandbox.client.call("run_command", {"command": sparse, "timeout_s": 60})
            used = int(answer["output"]["stdout"].split()[-1])
            print(f"60 sparse files of 15 MiB: {used / MIB:.1f} MiB on disk; {answer.get('error')}")
        finally:
            await sandbox.stop()


if __name__ == "__main__":
    asyncio.run(main())
