"""`belay report` of the example after a kill and a resume, opened in headless Chromium with no
network.

The example runs through the real CLI with two waits a person ends: the patch's approval (the
manifest's grant is removed, so it waits on the user) and an external condition (a copy of the
plan waits for CI before the verification step finishes). `belay run` is killed right after it
asks to file the ticket, `belay resume` continues it, the waits are answered while it runs, and
the session completes. The report is then opened in Debian's Chromium inside a new network
namespace (`unshare --net`: no interface but a loopback that is down), a screenshot is taken
where pytest keeps the test's files (its path is printed), and the page's text, as Chromium built
it (`--dump-dom`), is checked for every step and every wait in the record, the interruption, the
recovery, and the command that fetches each deliverable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from belay.harness.attempt import fault_key
from belay.journal.events import Event
from belay.journal.state import fold
from belay.views.report.words import duration
from tests.belay_cli import read_events, run_belay, run_until, start_belay
from tests.harness.example import EXAMPLE, SESSION, manifest_copy
from tests.journal.fixtures import ReadPage
from tests.testenv.polling import wait_until

KILL_AT = "tool_request:researcher.diagnose.4"  # create_ticket: unsafe, settled by a probe on resume
CI_WAIT = "wait-implementer.verify.3"
APPROVAL = "approve-implementer.publish.3"
ROOT = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 180.0  # a guard against a hang, never a timing assertion
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str:
    """Debian's Chromium, which `make setup` installs (hack/install-report-tools.sh). Where it is
    missing the script is run once more; the test skips only where it cannot install (not root,
    or no apt-get), and fails where it could have and did not."""
    found = shutil.which("chromium")
    if found:
        return found
    script = ROOT / "hack" / "install-report-tools.sh"
    installed = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"chromium cannot be installed here (needs root and apt-get): {installed.stderr.strip()}")
    pytest.fail(f"chromium is not installed and {script.name} failed: {installed.stderr[-2000:]}")


def offline(*command: str) -> list[str]:
    """A command in a new network namespace: it can reach nothing, not even loopback (whose
    interface is down). Without root the namespace needs a user namespace of its own."""
    user_namespace = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", *user_namespace, "--net", "--", *command]


def open_in_chromium(page: Path, workdir: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    profile = workdir / f"chromium-profile-{len(list(workdir.glob('chromium-profile-*')))}"
    profile.mkdir(parents=True)  # a new, empty profile for every start
    return subprocess.run(
        offline(chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *mode, page.as_uri()),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )


def test_the_browser_namespace_reaches_nothing() -> None:
    """The wall the report test leans on: a server listening on this machine's loopback is reached
    from here and not from inside `offline(...)`."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        reach = [
            sys.executable,
            "-c",
            f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)",
        ]
        assert subprocess.run(reach, capture_output=True, check=False).returncode == 0
        walled = subprocess.run(offline(*reach), capture_output=True, text=True, check=False)
        assert walled.returncode != 0 and "Network is unreachable" in walled.stderr, walled.stderr


# --------------------------------------------------------------------------------------------------
# The example, killed, resumed, with two waits a person ends


def plan_with_a_ci_wait(directory: Path) -> Path:
    """The example's plan, with the implementer waiting for CI before its verification finishes."""
    plan = yaml.safe_load((EXAMPLE / "plan.yaml").read_text())
    verify = next(s for s in plan["subagents"]["implementer"]["steps"] if s["id"] == "verify")
    verify["actions"].append(
        {
            "tool": "wait_on_external",
            "text": "CI runs the whole suite on the fix branch.",
            "arguments": {
                "reason": "CI must pass on the fix branch",
                "condition": "ci/parser-fix == success",
            },
        }
    )
    path = directory / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def until(home: Path, wanted: str, process: subprocess.Popen[bytes] | None = None) -> list[Event]:
    """The record once it holds an event whose fault key starts with `wanted`."""
    return wait_until(
        lambda: read_events(home, SESSION),
        f"{wanted} in the record",
        until=lambda events: any(fault_key(e).startswith(wanted) for e in events),
        timeout=STEP_TIMEOUT_S,
        interval=0.05,
        while_running=process,
        describe=lambda: (home / "belay.log").read_text()[-2000:] if (home / "belay.log").exists() else "",
    )


def interrupted_and_resumed(home: Path) -> list[Event]:
    """Run the example until it asks to file the ticket, kill -9 it, resume it, answer its waits
    while it runs, and return the record of the completed session."""
    manifest = manifest_copy(home.parent / "manifest", approvals=[])
    spec = yaml.safe_load(manifest.read_text())
    spec["spec"]["executor"]["plan"] = str(plan_with_a_ci_wait(home.parent / "manifest"))
    manifest.write_text(yaml.safe_dump(spec, sort_keys=False))

    reached, _ = run_until(home, ["run", "--quiet", str(manifest)], KILL_AT, timeout=STEP_TIMEOUT_S)
    assert reached, f"the run ended before {KILL_AT}"

    resume = start_belay(home, "resume", "--quiet", SESSION)
    try:
        until(home, f"wait:{CI_WAIT}", resume)
        answer = run_belay(home, "approve", SESSION, CI_WAIT, "--by", "ci", "-m", "suite green")
        assert answer.returncode == 0, answer.stderr
        until(home, "approval_request:implementer.publish.3", resume)
        answer = run_belay(home, "approve", SESSION, APPROVAL, "--by", "dana")
        assert answer.returncode == 0, answer.stderr
        assert resume.wait(timeout=STEP_TIMEOUT_S) == 0, (home / "belay.log").read_text()[-2000:]
    finally:
        if resume.poll() is None:
            os.killpg(resume.pid, signal.SIGKILL)
            resume.wait()
    return read_events(home, SESSION)


@pytest.mark.slow
def test_the_report_of_an_interrupted_session_opens_offline_and_shows_every_step_and_wait(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    events = interrupted_and_resumed(home)
    state = fold(events)
    assert state.lifecycle.completed and state.lifecycle.harness_lost == 1

    page = tmp_path / "report.html"
    written = run_belay(home, "report", SESSION, "-o", str(page))
    assert written.returncode == 0, written.stderr
    assert f"wrote {page}" in written.stderr

    static = ReadPage(page.read_text())
    assert "script" not in static.tags and not static.fetches, static.fetches

    screenshot = tmp_path / "report.png"
    shot = open_in_chromium(page, tmp_path, "--window-size=1400,1000", f"--screenshot={screenshot}")
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    print(f"screenshot of the report: {screenshot}")

    dumped = open_in_chromium(page, tmp_path, "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    rendered = ReadPage(dumped.stdout)
    text = rendered.text
    assert "script" not in rendered.tags

    # Every step of the record, with how long it took, and every wait, with how long it lasted.
    for task in state.tasks.values():
        assert task.task_id in text, task.task_id
    for wait in [*state.waits, *state.approvals]:
        assert wait in text, wait
    assert "approve-implementer.publish.3" in text and "granted by dana" in text
    assert CI_WAIT in text and "answered by ci" in text
    assert "ci/parser-fix == success" in text
    # The interruption: where, how long, and who resumed it.
    [lost] = [e for e in events if e.type == "lifecycle" and e.payload.kind == "harness_lost"]
    [resumed] = [
        e
        for e in events
        if e.type == "lifecycle" and e.payload.kind == "harness_started" and e.payload.attempt == 2
    ]
    last_of_first = max(e.created_at for e in events if e.actor.kind == "harness" and e.actor.attempt == 1)
    gap = duration((resumed.created_at - last_of_first).total_seconds())
    assert f"\u26a1 interrupted {gap}" in text, gap
    assert f"Interrupted {gap}: " in text and re.search(r"It was doing: [^.]*researcher/diagnose", text)
    assert "attempt 2 resumed it" in text
    assert lost.payload.detail in text or lost.payload.reason in text
    # The recovery: each sandbox restored from the checkpoint its subagent had reached when the
    # run was killed (which one depends on how far it got), the ticket settled by a probe.
    assert "Recovery by attempt 2" in text
    restores = [
        e.payload
        for e in events
        if e.type == "lifecycle" and e.payload.kind == "restored" and e.actor.attempt == 2
    ]
    assert sorted(p.subagent for p in restores) == ["implementer", "researcher"]
    for restored in restores:
        expected = f"new sandbox for {restored.subagent}, restored from checkpoint {restored.checkpoint_id}"
        assert expected in text, expected
    assert "create_ticket (researcher.diagnose.4) was in flight: its outcome was unknown" in text
    assert "create_ticket (researcher.diagnose.4) reconciled: it did not take effect, by probe" in text
    # Where to fetch each deliverable.
    for name in state.deliverables:
        assert f"belay artifacts get {SESSION} {name} -o {name}" in text
    assert json.dumps(sorted(state.deliverables)) == '["fix.patch", "report.md"]'
