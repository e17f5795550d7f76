"""`python -m belay.sandbox.loopback_exec PROGRAM [ARGS...]`: bring `lo` up, then become PROGRAM.

Used after `unshare --net` for each command of a sandbox that cannot isolate its whole server (a
pod listening on TCP): a new network namespace starts with `lo` down, and a command that talks to
its own localhost (a test server, a database) should work there as it does locally.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

from belay.sandbox.isolation import bring_loopback_up


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m belay.sandbox.loopback_exec PROGRAM [ARGS...]")
    with contextlib.suppress(OSError):
        bring_loopback_up()
    become(sys.argv[1:])


def become(program: list[str]) -> NoReturn:
    """This process becomes `program`; one that cannot be run exits 127, as a shell's would."""
    try:
        os.execvp(program[0], program)
    except OSError as error:
        print(f"{program[0]}: {error.strerror}", file=sys.stderr)
        raise SystemExit(127) from error


if __name__ == "__main__":
    main()
