"""Free loopback ports and readiness checks over HTTP(S): a component is ready when its own health
endpoint says so, never after a fixed sleep."""

from __future__ import annotations

import collections
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.testenv.polling import wait_until

LOOPBACK = "127.0.0.1"


# The ports this process handed out lately: the kernel may offer a port again as soon as the probe
# socket is closed, and the components of one cluster (an etcd's members, say) are given their
# ports before any of them binds.
_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=1024)


def free_port() -> int:
    """A port the kernel just considered free on loopback, and not one this process handed out
    lately. The socket is closed before the server binds it, so a race with another process is
    possible in principle; a server that fails to bind is reported with its log."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port


class NotReady(RuntimeError):
    pass


def http_get(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


def http_post_json(
    url: str, body: dict[str, Any], timeout: float = 2.0, context: ssl.SSLContext | None = None
) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return json.loads(response.read())


# What a server that is still starting answers a health check with: not ready yet.
NOT_YET_ERRORS = (OSError, ValueError, http.client.HTTPException)


def wait_ready(
    check: Callable[[], bool],
    what: str,
    timeout: float,
    still_starting: Callable[[], bool] = lambda: True,
    describe_failure: Callable[[], str] = lambda: "",
) -> None:
    """Polls `check` until it holds. Gives up early when `still_starting` says the process is gone."""

    def ready() -> bool:
        if not still_starting():
            raise NotReady(f"{what} exited before it was ready\n{describe_failure()}")
        return check()

    wait_until(
        ready,
        f"{what} to be ready",
        timeout=timeout,
        interval=0.1,
        ignoring=NOT_YET_ERRORS,
        describe=describe_failure,
    )


def healthy(url: str, context: ssl.SSLContext | None = None, expect: bytes | None = None) -> bool:
    status, body = http_get(url, context)
    return status == 200 and (expect is None or expect in body)
