"""A network of the test's own, for destinations that are not the host.

The egress proxy never connects to the host it runs on (its loopback, link-local and own addresses),
so a destination it may open has to be another machine. `private_network()` moves the calling
thread into a new network namespace (the "host" as the proxy sees it: the test's event loop runs
in this thread, and the sandboxes it starts are forked from it) joined by a veth pair to a second
namespace, the "remote" machine, whose addresses are not the host's. Nothing on the machine's own
network changes: both namespaces and the pair vanish when the thread goes back to its namespace
and the process holding the second one ends. Needs root and `ip`, `unshare`, `nsenter`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

CLONE_NEWNET = 0x40000000
HOST_SIDE = "10.231.0.1"
REMOTE_SIDE = ("10.231.0.2", "10.231.0.3")
_libc = ctypes.CDLL(None, use_errno=True)


def _enter(descriptor: int) -> None:
    if _libc.setns(descriptor, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@dataclass
class PrivateNetwork:
    host_address: str  # the host's own address on the link to the remote machine
    remote_addresses: tuple[str, str]
    remote_pid: int  # the process holding the remote machine's namespace

    def remote_listener(self, address: str, port: int = 0) -> socket.socket:
        """A listening TCP socket on the remote machine (it stays in that namespace)."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        remote = os.open(f"/proc/{self.remote_pid}/ns/net", os.O_RDONLY)
        try:
            _enter(remote)
            try:
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((address, port))
                listener.listen()
                listener.setblocking(False)
            finally:
                _enter(own)
        finally:
            os.close(own)
            os.close(remote)
        return listener


@contextlib.contextmanager
def private_network() -> Iterator[PrivateNetwork]:
    missing = [tool for tool in ("ip", "unshare", "nsenter") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        pytest.skip(f"a private network needs root and {', '.join(missing) or 'ip, unshare, nsenter'}")
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    if _libc.unshare(CLONE_NEWNET) != 0:
        os.close(original)
        pytest.skip(f"cannot make a network namespace: {os.strerror(ctypes.get_errno())}")
    remote = None
    try:
        _run("ip", "link", "set", "lo", "up")
        remote = subprocess.Popen(["unshare", "--net", "sleep", "3600"])
        inside = ["nsenter", "-t", str(remote.pid), "-n"]
        # Until `unshare` has made the namespace, the process is still in this one.
        own_namespace = os.readlink("/proc/thread-self/ns/net")
        while os.readlink(f"/proc/{remote.pid}/ns/net") == own_namespace:
            if remote.poll() is not None:
                raise RuntimeError("unshare --net exited before it made a namespace")
            time.sleep(0.01)
        _run("ip", "link", "add", "blhost", "type", "veth", "peer", "name", "blremote")
        _run("ip", "link", "set", "blremote", "netns", str(remote.pid))
        _run("ip", "addr", "add", f"{HOST_SIDE}/29", "dev", "blhost")
        _run("ip", "link", "set", "blhost", "up")
        for address in REMOTE_SIDE:
            _run(*inside, "ip", "addr", "add", f"{address}/29", "dev", "blremote")
        _run(*inside, "ip", "link", "set", "blremote", "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        yield PrivateNetwork(HOST_SIDE, REMOTE_SIDE, remote.pid)
    finally:
        if remote is not None:
            remote.kill()
            remote.wait()
        _enter(original)
        os.close(original)
