"""The first process of a pod run by the kubelet stand-in (`tests/controller/kubelet.py`), in the
pod's own PID namespace, as `docker run --init` would give a container: it starts the pod's
command as its child, passes SIGTERM, SIGINT and SIGHUP on to it, reaps whatever is orphaned in the
namespace, and exits with the command's status. When it exits the kernel kills every process left
in the namespace, so nothing a pod started outlives it.

A namespace's first process ignores the signals it has no handler for, SIGSTOP included, even
from itself; the command, as its child, keeps ordinary signal semantics (a harness can stop itself
at a fault point).

    python tests/controller/pod_init.py COMMAND [ARG...]
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    child = 0
    early: list[int] = []  # signals that arrived before the command was started

    def forward(number: int, frame: object) -> None:
        if child <= 0:
            early.append(number)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, number)

    # Before the fork, so no signal finds the namespace's first process without a handler (it
    # would be ignored). The command's exec puts the defaults back.
    for number in FORWARDED:
        signal.signal(number, forward)
    child = os.fork()
    if child == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as error:
            print(f"pod_init: cannot run {argv[0]}: {error}", file=sys.stderr)
            os._exit(127)
    for number in early:
        forward(number, None)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
