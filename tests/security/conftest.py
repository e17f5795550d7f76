"""Each security test runs twice: against the walls, where the attack must fail, and with the walls
switched off (BELAY_SANDBOX_WALLS=off, allowed only for `isolation: best-effort`), where the same
attack must get through. The second half proves the test can fail: its check sees the attack when
nothing stops it."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from belay.sandbox.walls import WALLS_ENV

WALLS = "walls"
NO_WALLS = "no-walls"


@pytest.fixture(params=[WALLS, NO_WALLS])
def walls_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == NO_WALLS:
        monkeypatch.setenv(WALLS_ENV, "off")
    else:
        monkeypatch.delenv(WALLS_ENV, raising=False)
    return str(request.param)


def isolation_for(mode: str) -> str:
    """With walls, the default a manifest gets; without, the only level the switch is allowed for."""
    return "required" if mode == WALLS else "best-effort"


def judge(mode: str, got_through: bool, attack: str) -> None:
    if mode == WALLS:
        assert not got_through, f"{attack}: got through the walls"
    else:
        assert got_through, f"{attack}: failed even without walls, so this test could not see it succeed"


def processes_with_argument(marker: str, program: str | None = None) -> list[int]:
    """Every process on the machine whose command line contains `marker` (and, given `program`, whose
    first argument is it), whatever its namespace, environment or session: how an escaped process
    is found without trusting any of them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in command_line and (
            program is None or command_line.startswith(f"{program}\0".encode())
        ):
            found.append(int(entry.name))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
