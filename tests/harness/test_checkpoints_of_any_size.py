"""A checkpoint of any number of declared files, and a checkpoint that cannot be made fails its
step where a person sees it.

With 2,000 declared files every checkpoint once failed (their paths passed to git as one argument,
past the 64 KiB command limit) and the session still ended Succeeded with its steps "running". The
paths now reach git through a file, a list too long for one event goes to a manifest in the
artifact store, and a restore reads it back. A checkpoint that fails (here the agent replaced the
checkpoints' repository with a file) fails the step with the reason: the briefing lists it under
"Needs attention", and the session does not end Succeeded."""

from __future__ import annotations

from pathlib import Path

from belay.journal.events import Checkpoint, Lifecycle, LifecycleKind, Task, TaskStatus
from belay.local.runtime import LocalHome
from tests.belay_cli import run_belay
from tests.harness.content import PUBLISH, brief, brief_text, result_of, run_session

FILES = 3000
DIRECTORY = "out/" + "a-directory-with-a-long-name-" * 4
# Each name about 230 bytes: their list is some 700 KB, past any one argument or event.
MAKE_FILES = (
    'python3 -c "import os, sys\n'
    "d = sys.argv[1]; os.makedirs(d, exist_ok=True)\n"
    f"for i in range({FILES}):\n"
    "    open(f'{d}/file-{i:05d}-' + 'with-a-long-name-' * 6 + '.txt', 'w').write(f'{i}\\\\n')\" "
    f"{DIRECTORY}"
)
LAST = f"{DIRECTORY}/file-{FILES - 1:05d}-" + "with-a-long-name-" * 6 + ".txt"


def test_a_checkpoint_of_thousands_of_long_named_files_is_made_and_restored(tmp_path: Path) -> None:
    steps = [
        {
            "id": "many",
            "title": "Write a few thousand files",
            "verify": {"command": f"test -s '{LAST}'", "exit_code": 0},
            "actions": [{"tool": "run_command", "arguments": {"command": MAKE_FILES, "timeout_s": 600}}],
        },
        {
            "id": "after",
            "title": "Lose the sandbox, then publish",
            "verify": {"command": f"test -s '{LAST}' && test -s out/result.txt", "exit_code": 0},
            # The sandbox is lost twice: each replacement is restored from the checkpoint above.
            "actions": [
                {"tool": "run_command", "arguments": {"command": "kill -9 $PPID; sleep 5"}},
                *PUBLISH,
            ],
        },
    ]
    events = run_session(tmp_path, steps)

    [many] = [
        e.payload
        for e in events
        if isinstance(e.payload, Checkpoint) and e.payload.checkpoint_id == "solo/many"
    ]
    assert many.verified and many.repository_revision is not None
    assert many.declared_manifest is not None and many.declared_artifacts == ()
    listed = LocalHome(tmp_path / "home").open_artifact_store().get_manifest(many.declared_manifest.sha256)
    assert len(listed) == FILES and LAST in {entry.name for entry in listed}
    restored = [
        e.payload
        for e in events
        if isinstance(e.payload, Lifecycle)
        and e.payload.kind == LifecycleKind.RESTORED
        and e.payload.checkpoint_id == "solo/many"
    ]
    assert len(restored) == 2 and all(f"{FILES} declared files" in r.detail for r in restored)
    # `belay gc` keeps the manifest and every file it lists.
    collected = run_belay(tmp_path / "home", "gc")
    assert collected.returncode == 0, collected.stderr
    store = LocalHome(tmp_path / "home").open_artifact_store()
    assert len(store.get_manifest(many.declared_manifest.sha256)) == FILES
    assert {store.get(entry.sha256) for entry in listed} == {f"{i}\n".encode() for i in range(FILES)}
    page = brief(tmp_path)
    assert page["phase"] == "Succeeded"
    assert [(s["task_id"], s["status"]) for s in page["steps"] if s["task_id"].startswith("solo/")] == [
        ("solo/many", "verified"),
        ("solo/after", "verified"),
    ]


def test_a_checkpoint_that_cannot_be_made_fails_its_step_visibly(tmp_path: Path) -> None:
    steps = [
        {
            "id": "break",
            "title": "Replace the checkpoints' repository with a file",
            "actions": [
                *PUBLISH,
                {"tool": "run_command", "arguments": {"command": "rm -rf .belay && echo mine > .belay"}},
            ],
        }
    ]
    events = run_session(tmp_path, steps, proven=False)

    done = result_of(events, "solo.break.done")
    assert not done.ok and (done.error or "").startswith("the checkpoint of step 'break' failed: ")
    assert "\n" not in (done.error or ""), done.error  # the sandbox's error page joined to one line
    [task] = [e.payload for e in events if isinstance(e.payload, Task) and e.payload.task_id == "solo/break"][
        -1:
    ]
    assert task.status == TaskStatus.FAILED and task.detail == done.error
    assert not [
        e for e in events if isinstance(e.payload, Checkpoint) and e.payload.checkpoint_id == "solo/break"
    ]

    # The run ended, and the record does not prove the step done (belay.journal.proof).
    page = brief(tmp_path)
    assert page["phase"] == "NeedsAttention"
    assert [(s["task_id"], s["status"]) for s in page["steps"] if s["task_id"] == "solo/break"] == [
        ("solo/break", "failed")
    ]
    [attention] = [a for a in page["needs_attention"] if a["id"] == "solo/break"]
    assert (attention["kind"], attention["summary"]) == ("unproven", f"step solo/break failed: {done.error}")
    text = brief_text(tmp_path)
    assert "step solo/break failed: the checkpoint of step 'break' failed" in text.split("Needs attention")[1]
