"""What a person hands Belay is read within bounds: a manifest or plan is read only from a regular
file under the cap (a device such as /dev/zero, a FIFO no one writes, a directory or a 60 MB file
is refused at once, in one line), a key given twice in one mapping is refused naming it and both
lines, and a file that is no manifest or plan is refused without a word of it quoted back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from belay.api.bounded_yaml import MAX_FILE_BYTES, FileRefused, load_yaml, read_regular_file
from belay.harness.models.scripted import PlanError, load_plan
from tests.api.invalid_manifests import PLAN, valid_manifest
from tests.belay_cli import run_belay

# Far under what reading the whole input would take: minutes for a 60 MB manifest, never for a FIFO.
PROMPT_S = 60


def write_manifest(directory: Path, plan: Path | str | None = None, text: str | None = None) -> Path:
    manifest = valid_manifest("bounded")
    if plan is not None:
        manifest["spec"]["executor"]["plan"] = str(plan)
    path = directory / "session.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(manifest, sort_keys=False))
    return path


def refused_in_one_line(home: Path, *args: str) -> str:
    began = time.monotonic()
    result = run_belay(home, *args, timeout=PROMPT_S)
    assert time.monotonic() - began < PROMPT_S
    assert result.returncode != 0, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (home / "sessions").exists(), "something was installed"
    return lines[0]


def a_fifo(directory: Path) -> Path:
    fifo = directory / "fifo.yaml"
    os.mkfifo(fifo)
    return fifo


def a_large_manifest(directory: Path) -> Path:
    """A valid manifest padded past the cap with a request part: parsed whole, minutes of work."""
    path = directory / "large.yaml"
    text = yaml.safe_dump(valid_manifest("bounded"), sort_keys=False)
    path.write_text(
        text.replace("  request:\n", "  request:\n    padding: " + "x" * (60 * 1024 * 1024) + "\n", 1)
    )
    return path


@pytest.mark.parametrize("what", ["dev-zero", "fifo", "directory", "large"])
def test_a_manifest_no_regular_file_under_the_cap_is_refused_at_once(tmp_path: Path, what: str) -> None:
    path = {
        "dev-zero": lambda: Path("/dev/zero"),
        "fifo": lambda: a_fifo(tmp_path),
        "directory": lambda: tmp_path,
        "large": lambda: a_large_manifest(tmp_path),
    }[what]()
    line = refused_in_one_line(tmp_path / "home", "run", "--quiet", str(path))
    said = {
        "dev-zero": "cannot read a character device: Belay reads only from a regular file",
        "fifo": "cannot read a FIFO: Belay reads only from a regular file",
        "directory": "cannot read a directory: Belay reads only from a regular file",
        "large": f"more than the {MAX_FILE_BYTES:,} Belay reads",
    }[what]
    assert line.startswith(f"error: bad manifest: {path}: ") and said in line, line


@pytest.mark.parametrize("what", ["dev-zero", "fifo", "large"])
def test_a_plan_no_regular_file_under_the_cap_is_refused_at_once(tmp_path: Path, what: str) -> None:
    if what == "large":
        plan = tmp_path / "large-plan.yaml"
        plan.write_text(PLAN.read_text() + "#" + "x" * MAX_FILE_BYTES + "\n")
    else:
        plan = Path("/dev/zero") if what == "dev-zero" else a_fifo(tmp_path)
    line = refused_in_one_line(tmp_path / "home", "run", "--quiet", str(write_manifest(tmp_path, plan)))
    assert "spec.executor.plan: " in line and (
        "only from a regular file" in line or "more than the" in line
    ), line


def test_reading_a_fifo_neither_waits_for_a_writer_nor_reads_a_device_forever(tmp_path: Path) -> None:
    # In a process of its own: a read that blocked would hang this one.
    script = (
        "import sys; from pathlib import Path\n"
        "from belay.api.bounded_yaml import read_regular_file, FileRefused\n"
        "for path in sys.argv[1:]:\n"
        "    try: read_regular_file(Path(path))\n"
        "    except FileRefused as error: print(error)\n"
    )
    fifo = a_fifo(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", script, str(fifo), "/dev/zero", "/dev/urandom"],
        capture_output=True,
        text=True,
        timeout=PROMPT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "cannot read a FIFO: Belay reads only from a regular file",
        "cannot read a character device: Belay reads only from a regular file",
        "cannot read a character device: Belay reads only from a regular file",
    ]


def test_a_file_at_the_cap_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    at_cap = tmp_path / "at-cap"
    at_cap.write_bytes(b"a" * MAX_FILE_BYTES)
    assert len(read_regular_file(at_cap)) == MAX_FILE_BYTES
    with at_cap.open("ab") as handle:
        handle.write(b"a")
    with pytest.raises(FileRefused, match="more than the"):
        read_regular_file(at_cap)


def test_a_second_metadata_is_refused_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    text = write_manifest(tmp_path).read_text() + "metadata:\n  name: renamed\n"
    second = len(text.splitlines()) - 1
    manifest = write_manifest(tmp_path, text=text)
    first = 1 + next(n for n, line in enumerate(text.splitlines()) if line.startswith("metadata:"))

    line = refused_in_one_line(tmp_path / "home", "run", "--quiet", str(manifest))

    assert f"the key 'metadata' (first given at line {first}) is given again" in line, line
    assert f"at line {second}, column 1" in line, line


def test_a_key_twice_in_a_plan_is_refused_at_any_depth(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("subagents:\n  researcher:\n    steps: []\n    steps: []\n")
    with pytest.raises(
        PlanError, match=r"the key 'steps' \(first given at line 3\) is given again .* line 4"
    ):
        load_plan(plan)


def test_a_merge_key_is_no_duplicate_and_keys_beside_it_override_it() -> None:
    loaded = load_yaml("base: &base {a: 1, b: 2}\nderived:\n  <<: *base\n  b: 3\n")
    assert loaded["derived"] == {"a": 1, "b": 3}
    with pytest.raises(yaml.YAMLError, match="the key 'b'"):
        load_yaml("derived:\n  <<: {a: 1}\n  b: 3\n  b: 4\n")


SECRET = "s3cr3t-l1ne"
# Files of other formats a plan path or manifest path may name by mistake, each holding SECRET.
OTHER_FORMATS = {
    "dotenv": f"API_TOKEN_{SECRET}: {SECRET}\nOTHER: x\n",
    "json": f'{{"password_{SECRET}": "{SECRET}", "subagents": 3}}',
    "passwd": f"root:x:0:0:{SECRET}:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n",
    "ini": f"[section]\nkey = {SECRET}\n",
    "list": f"- {SECRET}\n- {SECRET}: 1\n",
    "binary": "\x00\x01" + SECRET,
    "tabs": f"a:\n\t{SECRET}: 1\n",
}


@pytest.mark.parametrize("kind", sorted(OTHER_FORMATS))
def test_a_file_of_another_format_is_refused_without_quoting_it(tmp_path: Path, kind: str) -> None:
    other = tmp_path / f"other.{kind}"
    other.write_text(OTHER_FORMATS[kind])
    as_plan = refused_in_one_line(tmp_path / "home", "run", "--quiet", str(write_manifest(tmp_path, other)))
    as_manifest = refused_in_one_line(tmp_path / "home", "run", "--quiet", str(other))
    for line in (as_plan, as_manifest):
        assert SECRET not in line.replace(str(other), ""), line
