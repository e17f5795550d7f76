"""What a killed attempt leaves on disk goes once the record no longer needs it: a harness killed
while it streams a large deliverable into the artifact store leaves a partial upload, the old
workspace and (had it died between storing a blob and recording it) an orphan blob; after `belay
resume`, none of them is left, and everything the record names still is. `belay gc` does the same
on demand, and `--dry-run` only says what would go."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from belay.local.garbage import GRACE_S, MARGIN_S
from belay.stores.filesystem import FilesystemArtifactStore
from tests.belay_cli import (
    belay_command,
    completed,
    kill_group,
    read_events,
    run_belay,
    start_belay,
    wait_until_stopped,
)
from tests.scripted import write_scripted_session
from tests.testenv.polling import wait_until

SESSION = "big-publish"
BIG_BYTES = 96 * 1024 * 1024
# Deterministic, so the test knows the deliverable's hash.
MAKE_BIG = f"mkdir -p out && yes 'belay gc' | head -c {BIG_BYTES} > out/big.bin"
PUBLISH = "tool_request:publisher.publish.1"


def big_bytes() -> bytes:
    line = b"belay gc\n"
    return (line * (BIG_BYTES // len(line) + 1))[:BIG_BYTES]


def manifest(directory: Path) -> Path:
    steps = [
        {
            "id": "make",
            "title": "Make a large file",
            "verify": {"command": "test -s out/big.bin", "exit_code": 0},
            "actions": [{"tool": "run_command", "arguments": {"command": MAKE_BIG}}],
        },
        {
            "id": "publish",
            "title": "Publish it",
            "actions": [
                {"tool": "publish_deliverable", "arguments": {"path": "out/big.bin", "name": "big.bin"}}
            ],
        },
    ]
    publisher = {"name": "publisher", "networkProfile": "none", "declared": ["out/*"]}
    return write_scripted_session(
        directory, SESSION, "Publish a large file.", [publisher], {"publisher": steps}
    )


def partial_uploads(home: Path) -> list[Path]:
    return [p for p in (home / "artifacts" / "tmp").glob("*") if p.is_file()]


def workspaces(home: Path) -> list[str]:
    return sorted(
        p.name for p in (home / "sessions" / SESSION / "sandboxes" / "publisher").glob("workspace-*")
    )


def kill_while_publishing(home: Path, session_manifest: Path) -> None:
    """`belay run` stopped right after it records the publish, let go, and SIGKILLed (its whole
    process group) once the deliverable's upload has begun and before it ends."""
    process = start_belay(home, "run", "--quiet", str(session_manifest), stop_after=PUBLISH)
    wait_until_stopped(process, PUBLISH)
    os.kill(process.pid, signal.SIGCONT)
    wait_until(
        lambda: any(p.stat().st_size > 0 for p in partial_uploads(home)),
        "the deliverable's upload to begin",
        timeout=60,
        interval=0.001,
        while_running=process,
    )
    kill_group(process)


def test_a_kill_during_a_large_publish_leaves_nothing_after_the_resume(tmp_path: Path) -> None:
    home = tmp_path / "home"
    kill_while_publishing(home, manifest(tmp_path / "manifest"))
    assert partial_uploads(home), "the kill came after the upload"
    assert workspaces(home) == ["workspace-1"]
    # What a harness killed between storing a blob and recording it leaves: bytes no record names.
    orphan = FilesystemArtifactStore(home / "artifacts").put(b"stored, never recorded\n")
    orphan_path = home / "artifacts" / "blobs" / orphan.sha256[:2] / orphan.sha256
    past_grace = time.time() - GRACE_S - 60  # a blob no record names goes once its grace is over
    os.utime(orphan_path, (past_grace, past_grace))
    time.sleep(MARGIN_S + 0.5)  # what a resume finds: all of it written before it started

    resumed = run_belay(home, "resume", "--quiet", SESSION)

    assert resumed.returncode == 0, resumed.stderr
    assert completed(read_events(home, SESSION))
    assert "belay: removed 1 partial upload" in resumed.stderr, resumed.stderr
    assert "1 orphan blob" in resumed.stderr and "1 superseded workspace" in resumed.stderr
    assert partial_uploads(home) == []
    assert not orphan_path.exists()
    assert workspaces(home) == ["workspace-2"]
    # What the record names is all there: the deliverable, and the checkpoint it was restored from.
    fetched = run_belay(home, "artifacts", "get", SESSION, "big.bin", "-o", str(tmp_path / "big.bin"))
    assert fetched.returncode == 0, fetched.stderr
    assert (
        hashlib.sha256((tmp_path / "big.bin").read_bytes()).hexdigest()
        == hashlib.sha256(big_bytes()).hexdigest()
    )
    again = run_belay(home, "gc")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing to remove; kept "), again.stdout
    assert run_belay(home, "report", SESSION, "-o", str(tmp_path / "report.html")).returncode == 0


def test_gc_dry_run_says_what_would_go_and_removes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    small = manifest(tmp_path / "manifest")
    small.write_text(small.read_text().replace(str(BIG_BYTES), "4096"))
    result = run_belay(home, "run", "--quiet", str(small))
    assert result.returncode == 0, result.stderr
    partial = home / "artifacts" / "tmp" / "cut-short.partial"
    partial.write_bytes(b"x" * 1000)
    orphan = FilesystemArtifactStore(home / "artifacts").put(b"never recorded\n")
    old = home / "sessions" / SESSION / "sandboxes" / "publisher" / "workspace-0"
    (old / "out").mkdir(parents=True)
    (old / "out" / "left.txt").write_text("from an attempt long gone\n")
    (old / "out").chmod(0o500)  # a command may leave a directory read-only
    past = time.time() - 60
    for path in (partial, home / "artifacts" / "blobs" / orphan.sha256[:2] / orphan.sha256):
        os.utime(path, (past, past))

    dry = run_belay(home, "gc", "--dry-run", "--grace", "30s")

    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert f"partial upload: {partial} (1.0 kB)" in lines
    assert any(line.startswith("orphan blob: ") and orphan.sha256 in line for line in lines)
    assert f"superseded workspace: {old} (26 bytes)" in lines
    assert lines[-1].startswith(
        "would remove 1 partial upload (1.0 kB), 1 orphan blob (15 bytes), 1 superseded"
    )
    assert partial.exists() and old.exists()

    done = run_belay(home, "gc", "--grace", "30s")

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("removed 1 partial upload")
    assert not partial.exists() and not old.exists()
    assert workspaces(home) == ["workspace-1"]
    assert run_belay(home, "brief", SESSION).returncode == 0


def test_gc_of_a_home_that_does_not_exist_removes_nothing(tmp_path: Path) -> None:
    result = subprocess.run(
        belay_command(tmp_path / "nowhere", "gc"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "nothing to remove; kept 0 blobs the records name\n"
    assert not (tmp_path / "nowhere").exists()
