"""What a sandbox call brings back is bounded by the manifest (`spec.limits`): `read_file` of a
file above `readFileBytes` is refused with a tool error naming the cap and the setting, and the
file reaches the artifact store in pieces (the result names it by sha256, `output_ref`) instead of
the harness's memory; a command's output is cut at `commandOutputBytes` per stream, and says so.
A call's own arguments cannot raise either cap.

The 1.2 GB file of the report is played by a 64 MiB one above a 4 KiB cap: the harness's peak
Python memory while it answers the call stays within a few pieces (1 MiB each), not the file."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from belay.harness.bounded import stored_when_too_large
from belay.journal.events import ToolResult
from belay.sandbox.local import LocalSandbox
from belay.stores.filesystem import FilesystemArtifactStore
from tests.belay_cli import read_events, run_belay
from tests.scripted import write_scripted_session

SESSION = "bounded"
READ_CAP = 4096
OUTPUT_CAP = 1000
BIG_BYTES = 3 * 1024 * 1024
MAKE_BIG = f"mkdir -p out && yes 'belay read' | head -c {BIG_BYTES} > out/big.txt"


def expected_big(size: int = BIG_BYTES) -> bytes:
    line = b"belay read\n"
    return (line * (size // len(line) + 1))[:size]


def read(path: str, **extra: Any) -> dict[str, Any]:
    return {"tool": "read_file", "arguments": {"path": path, **extra}}


def results(home: Path) -> dict[str, ToolResult]:
    return {
        e.payload.operation_id: e.payload
        for e in read_events(home, SESSION)
        if isinstance(e.payload, ToolResult)
    }


def test_read_file_above_the_cap_is_refused_naming_it_and_its_bytes_go_to_the_artifact_store(
    tmp_path: Path,
) -> None:
    actions = [
        {"tool": "run_command", "arguments": {"command": MAKE_BIG}},
        read("out/big.txt"),
        read("out/big.txt", max_bytes=16 * 1024 * 1024),  # the model asks for more: not its to set
        {"tool": "write_file", "arguments": {"path": "out/small.txt", "content": "small enough\n"}},
        read("out/small.txt"),
        {"tool": "run_command", "arguments": {"command": "head -c 5000 /dev/zero | tr '\\0' a"}},
    ]
    reader = {"name": "reader", "networkProfile": "none"}
    manifest = write_scripted_session(
        tmp_path / "manifest",
        SESSION,
        "Read a large file.",
        [reader],
        {"reader": [{"id": "read", "title": "Read", "actions": actions}]},
    )
    text = (
        manifest.read_text()
        + f"  limits:\n    readFileBytes: {READ_CAP}\n    commandOutputBytes: {OUTPUT_CAP}\n"
    )
    manifest.write_text(text)
    home = tmp_path / "home"

    result = run_belay(home, "run", "--quiet", str(manifest))

    assert result.returncode == 0, result.stderr
    found = results(home)
    digest = hashlib.sha256(expected_big()).hexdigest()
    # A cap of its own is no argument of read_file (its schema says so): refused before anything
    # is read, the manifest's cap untouched.
    asked_more = found["reader.read.3"]
    assert not asked_more.ok and asked_more.output is None and asked_more.output_ref is None
    assert "read_file: unexpected argument 'max_bytes'" in (asked_more.error or "")
    for operation_id in ("reader.read.2",):
        refused = found[operation_id]
        assert not refused.ok and refused.error is not None
        assert (
            f"'out/big.txt': it is {BIG_BYTES} bytes, above the read_file cap of {READ_CAP} bytes"
            in refused.error
        )
        assert "(spec.limits.readFileBytes)" in refused.error and f"sha256:{digest}" in refused.error
        assert refused.output == {
            "path": "out/big.txt",
            "size": BIG_BYTES,
            "cap": READ_CAP,
            "stored_as_artifact": digest,
        }
        assert refused.output_ref is not None and refused.output_ref.sha256 == digest
    assert FilesystemArtifactStore(home / "artifacts").get(digest) == expected_big()
    assert found["reader.read.5"].ok and found["reader.read.5"].output == {"content": "small enough\n"}
    output = found["reader.read.6"].output
    assert output["stdout"] == "a" * OUTPUT_CAP and output["truncated"] is True
    assert f"stdout cut at the command output cap of {OUTPUT_CAP} bytes" in output["stderr"]


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    started = await LocalSandbox.start(tmp_path / "sandboxes", "reader", "none")
    yield started
    await started.stop()


async def test_a_file_far_above_the_cap_reaches_the_artifact_store_in_pieces(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    size = 64 * 1024 * 1024
    made = await sandbox.client.call("run_command", {"command": MAKE_BIG.replace(str(BIG_BYTES), str(size))})
    assert made["ok"] and made["output"]["exit_code"] == 0, made
    store = FilesystemArtifactStore(tmp_path / "artifacts")

    tracemalloc.start()
    try:
        response = await sandbox.client.call("read_file", {"path": "out/big.txt", "max_bytes": READ_CAP})
        answer = await stored_when_too_large(sandbox.client, store, "read_file", response)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert answer.stored is not None and answer.stored.size == size
    assert answer.stored.sha256 == hashlib.sha256(expected_big(size)).hexdigest()
    assert answer.response["ok"] is False and f"cap of {READ_CAP} bytes" in answer.response["error"]
    assert peak < 8 * 1024 * 1024, f"the harness held {peak} bytes at once for a {size}-byte file"
