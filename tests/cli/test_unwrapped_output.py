"""What `belay` prints to a pipe or a file is never wrapped: a line that names a session or a
command stays whole for whoever copies or greps it (rich and click wrap at 80 columns when the
output is no terminal)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from belay.journal.events import Actor, EventDraft, UserInput, Wait, WaitKind
from belay.local.cli_process import run_belay
from belay.local.runtime import LocalHome

# A name longer than 80 columns on its own: any wrap at 80 cuts a line that holds it.
SESSION = "waiting"
WAIT = "a-question-whose-id-is-long-enough-that-every-line-naming-it-passes-eighty-columns"


def waiting_session(home: Path) -> None:
    async def append() -> None:
        store = LocalHome(home).open_event_store()
        try:
            drafts = [
                UserInput(goal="Ask first."),
                Wait(wait_id=WAIT, kind=WaitKind.ON_USER, reason="ok?"),
            ]
            await store.append(SESSION, [EventDraft(payload=p, actor=Actor(kind="harness")) for p in drafts])
        finally:
            await store.close()

    asyncio.run(append())


def test_an_answer_printed_to_a_pipe_is_one_line(tmp_path: Path) -> None:
    waiting_session(tmp_path)
    answered = run_belay(tmp_path, "answer", SESSION, WAIT, "yes, go on")
    assert answered.returncode == 0, answered.stderr
    [line] = [line for line in answered.stdout.splitlines() if line.strip()]
    assert WAIT in line


def test_help_printed_to_a_pipe_keeps_each_sentence_on_its_line(tmp_path: Path) -> None:
    shown = run_belay(tmp_path, "approve", "--help")
    assert shown.returncode == 0, shown.stderr
    sentence = "Approve one pending operation (bound to its payload hash), or answer yes to a wait."
    assert len(sentence) > 80
    assert sentence in [line.strip() for line in shown.stdout.splitlines()]
    assert "─" not in shown.stdout  # no box drawn as wide as a terminal it does not have
