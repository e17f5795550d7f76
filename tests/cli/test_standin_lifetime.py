"""A session's local stand-in does not outlive its session: it stops by itself once the `belay`
process that used it has been gone for its grace period (a session run to its end, a killed
`belay` never resumed), and `belay gc` stops one whose `belay` process is gone at once. Both on
the real command line, against the stand-in `belay run` starts when no provider is configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from belay.executors.endpoints import PROVIDERS
from tests.belay_cli import kill_group, run_belay, session_standin, start_belay, stop_session_standins
from tests.executors.example import SESSION, example_manifest
from tests.testenv.polling import wait_until

pytestmark = pytest.mark.slow

EXECUTOR = "openai-agents"
NO_PROVIDER = {name: "" for p in PROVIDERS.values() for name in (p.base_url, p.api_key)}
HANG_S = 300.0  # a guard against a hang, never a timing


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_standin_stops_once_its_session_ran_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BELAY_STANDIN_GRACE_S", "2")
    manifest = example_manifest(tmp_path / "manifest", EXECUTOR)
    home = tmp_path / "home"
    try:
        started = start_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
        wait_until(
            lambda: session_standin(home, SESSION, EXECUTOR) is not None, "the stand-in", timeout=HANG_S
        )
        standin = session_standin(home, SESSION, EXECUTOR)
        assert standin is not None
        assert started.wait(timeout=HANG_S) == 0
        wait_until(lambda: not alive(standin.pid), "the stand-in to stop after its session", timeout=60)
        assert session_standin(home, SESSION, EXECUTOR) is None
    finally:
        stop_session_standins(home)


def test_gc_stops_the_standin_of_a_killed_belay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BELAY_STANDIN_GRACE_S", "3600")  # it would wait for a resume that long
    manifest = example_manifest(tmp_path / "manifest", EXECUTOR)
    home = tmp_path / "home"
    try:
        running = start_belay(home, "run", "--quiet", str(manifest), environment=NO_PROVIDER)
        try:
            wait_until(
                lambda: session_standin(home, SESSION, EXECUTOR) is not None,
                "the stand-in",
                timeout=HANG_S,
                while_running=running,
            )
        finally:
            kill_group(running)
        standin = session_standin(home, SESSION, EXECUTOR)
        assert standin is not None  # it outlives the kill, as a provider's service would

        looked = run_belay(home, "gc", "--dry-run")
        assert looked.returncode == 0, looked.stderr
        assert f"orphan stand-in: {standin.directory} (would stop" in looked.stdout
        assert alive(standin.pid)

        collected = run_belay(home, "gc")
        assert collected.returncode == 0, collected.stderr
        assert f"orphan stand-in: {standin.directory} (stopped" in collected.stdout
        wait_until(lambda: not alive(standin.pid), "gc to stop the stand-in", timeout=30)
    finally:
        stop_session_standins(home)
