"""The tests' one wait: the probe's first accepted value, or a failure naming what was awaited
and the last value seen."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.testenv.polling import WaitFailed, settle, settle_async, wait_until, wait_until_async


def test_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, [], "ready", "later"])
    assert wait_until(lambda: next(values), "a value", timeout=5, interval=0) == "ready"


def test_until_decides_which_value_ends_the_wait() -> None:
    values = iter([[3, 2], [3], [], [1]])
    assert (
        wait_until(lambda: next(values), "an empty list", until=lambda v: v == [], timeout=5, interval=0)
        == []
    )
    with pytest.raises(WaitFailed, match=r"last seen: \[3, 2\]"):
        wait_until(lambda: [3, 2], "a short list", until=lambda v: len(v) < 2, timeout=0)


def test_fails_after_the_timeout_naming_what_and_the_last_value_seen() -> None:
    started = time.monotonic()
    with pytest.raises(
        WaitFailed, match=r"^timed out after 0.2 s waiting for the answer; last seen: \[\]\nthe log$"
    ):
        wait_until(lambda: [], "the answer", timeout=0.2, interval=0.01, describe=lambda: "the log")
    assert 0.2 <= time.monotonic() - started < 5
    assert issubclass(WaitFailed, AssertionError)


def test_a_probe_that_raises_ends_the_wait_unless_ignored() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("not yet")

    with pytest.raises(ConnectionRefusedError):
        wait_until(refused, "a connection", timeout=5)
    with pytest.raises(WaitFailed, match=r"last seen: ConnectionRefusedError\('not yet'\)"):
        wait_until(refused, "a connection", timeout=0.1, interval=0.01, ignoring=(OSError,))


def test_a_long_last_value_is_cut() -> None:
    def refused() -> bool:
        raise ValueError("x" * 5000)

    with pytest.raises(WaitFailed, match=r"xx\.\.\. \(5014 characters\)$"):
        wait_until(refused, "x", timeout=0, ignoring=(ValueError,))


def test_fails_at_once_when_the_process_it_waits_on_has_ended() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait()
    started = time.monotonic()
    with pytest.raises(
        WaitFailed, match=rf"^the file: pid {process.pid} ended first \(exit 3\); last seen: False$"
    ):
        wait_until(lambda: False, "the file", timeout=60, while_running=process)
    assert time.monotonic() - started < 5
    # What held by the time it ended still counts.
    assert wait_until(lambda: "done", "the file", timeout=60, while_running=process) == "done"


async def test_the_async_form_awaits_a_coroutine_probe_and_takes_a_plain_one() -> None:
    answers = iter([False, False, 7])

    async def probe() -> int | bool:
        return next(answers)

    assert await wait_until_async(probe, "seven", timeout=5, interval=0) == 7
    assert await wait_until_async(lambda: "plain", "a plain value", timeout=5) == "plain"
    with pytest.raises(WaitFailed, match="waiting for nothing; last seen: None"):
        await wait_until_async(lambda: None, "nothing", timeout=0.05, interval=0.01)


async def test_settle_returns_the_last_value_and_never_fails() -> None:
    values = iter([[2, 1], [1], [], [5]])
    assert settle(lambda: next(values), until=lambda left: not left, timeout=5, interval=0) == []
    started = time.monotonic()
    assert settle(lambda: [1], until=lambda left: not left, timeout=0.1, interval=0.01) == [1]
    assert time.monotonic() - started >= 0.1
    assert await settle_async(lambda: [1], until=lambda left: not left, timeout=0.05, interval=0.01) == [1]
