"""The home's disk full: every command that only reads the record still answers, as it would with
room to spare, and a command that writes ends with one line saying the disk is full.

The disk is a tmpfs just large enough for a copy of a finished home, filled to its last byte
(mounting needs root; elsewhere the test is skipped). A SQLite reader of a WAL file needs the
file's index (`-shm`), which it must create and cannot here: the read-only store falls back to
reading the main file alone (see belay.stores.sqlite.opening)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.belay_cli import run_belay
from tests.harness.example import MANIFEST, SESSION

# What each reading command prints that does not depend on the time it is asked (the homes' paths
# are replaced by HOME).
READS = {
    ("brief", "--json", SESSION): lambda out: {k: v for k, v in json.loads(out).items() if "age" not in k},
    ("events", "--json", SESSION): lambda out: out,
    ("sessions", "--json"): lambda out: [(r["session"], r["phase"]) for r in json.loads(out)["sessions"]],
    ("artifacts", SESSION): lambda out: [line.split()[:4] for line in out.splitlines()],
}


def size_of(directory: Path) -> int:
    return sum(path.lstat().st_size for path in directory.rglob("*"))


def fill(directory: Path) -> None:
    """Write until the filesystem refuses: ENOSPC."""
    with (directory / "filler").open("wb", buffering=0) as filler:
        block = b"\0" * 4096
        try:
            while True:
                filler.write(block)
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
        for size in (512, 1):  # the last partial block
            try:
                while True:
                    filler.write(block[:size])
            except OSError as error:
                assert error.errno == errno.ENOSPC, error


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], check=False, capture_output=True)


def test_reading_commands_answer_on_a_full_disk_and_a_write_says_it_is_full(
    tmp_path: Path, full_disk: Path
) -> None:
    home = tmp_path / "home"
    assert run_belay(home, "run", "--quiet", str(MANIFEST)).returncode == 0
    room = size_of(home) + (1 << 20)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={room}", "tmpfs", str(full_disk)],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, mounted.stderr
    full_home = full_disk / "home"
    shutil.copytree(home, full_home)

    def anonymous(text: str) -> str:
        return text.replace(str(full_home), "HOME").replace(str(home), "HOME")

    expected = {
        command: shown(anonymous(run_belay(home, *command).stdout)) for command, shown in READS.items()
    }
    fill(full_disk)
    assert shutil.disk_usage(full_disk).free == 0
    for command, shown in READS.items():
        result = run_belay(full_home, *command)
        assert result.returncode == 0 and not result.stderr, (command, result.stderr)
        assert shown(anonymous(result.stdout)) == expected[command], command
    assert expected[("sessions", "--json")] == [(SESSION, "Succeeded")]
    report = run_belay(full_home, "report", SESSION, "--output", str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "report.html").stat().st_size > 0

    approved = run_belay(full_home, "approve", SESSION, "review-report.md")
    assert approved.returncode != 0 and "Traceback" not in approved.stderr
    lines = [line for line in approved.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), approved.stderr
    assert "the disk holding it is full; free some space there" in lines[0], lines[0]
