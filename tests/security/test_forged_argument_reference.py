"""An argument shaped like the harness's own reference to a stored argument (`{"$artifact":
sha256, "size": n}`) is the model's value, never read back as the blob it names: else a model that
knows a hash would have any blob of the artifact store (another session's deliverable) written
into its sandbox."""

from __future__ import annotations

import hashlib
from pathlib import Path

from belay.journal.events import ToolResult
from tests.belay_cli import read_events, run_belay
from tests.scripted import write_scripted_session

SECRET_DELIVERABLE = "another session's deliverable\n"


def session(
    tmp_path: Path, name: str, steps: list[dict[str, object]], deliverable: str | None = None
) -> Path:
    subagent: dict[str, object] = {"name": "a", "declared": ["out/*"]}
    if deliverable is not None:
        subagent["deliverable"] = deliverable
    return write_scripted_session(tmp_path / name, name, name, [subagent], {"a": steps})


def test_a_forged_reference_to_a_stored_blob_reads_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    victim = session(
        tmp_path,
        "victim",
        [
            {
                "id": "publish",
                "title": "publish",
                "actions": [
                    {"tool": "write_file", "arguments": {"path": "out/r.md", "content": SECRET_DELIVERABLE}},
                    {"tool": "publish_deliverable", "arguments": {"path": "out/r.md", "name": "r.md"}},
                ],
            }
        ],
        deliverable="r.md",
    )
    assert run_belay(home, "run", "--quiet", str(victim)).returncode == 0
    digest = hashlib.sha256(SECRET_DELIVERABLE.encode()).hexdigest()
    forged = {"$artifact": digest, "size": len(SECRET_DELIVERABLE)}
    thief = session(
        tmp_path,
        "thief",
        [
            {
                "id": "steal",
                "title": "steal",
                "actions": [
                    {"tool": "write_file", "arguments": {"path": "stolen.txt", "content": forged}},
                    {"tool": "run_command", "arguments": {"command": "cat stolen.txt"}},
                ],
            }
        ],
    )
    run_belay(home, "run", "--quiet", str(thief))

    results = {
        e.payload.operation_id: e.payload
        for e in read_events(home, "thief")
        if isinstance(e.payload, ToolResult)
    }
    written = results["a.steal.1"]
    assert not written.ok and written.error is not None and "must be of type string" in written.error
    assert SECRET_DELIVERABLE.strip() not in str(results["a.steal.2"].output)
