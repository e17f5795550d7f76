"""What `belay message` (and `kubectl belay message`) sends a message to, and every refusal: the
meaning written once in `belay.cli.core.message`, read by both command lines."""

from __future__ import annotations

import pytest

from belay.cli.core.decide import OpenItems, OpenWait
from belay.cli.core.errors import CommandError
from belay.cli.core.message import to_message
from belay.journal import commands
from belay.journal.events import WaitKind


def items(*waits: OpenWait) -> OpenItems:
    return OpenItems(session="s", approvals=[], waits=list(waits), deliverables=[], unknown_outcomes=[])


def ended(subagent: str) -> OpenWait:
    return OpenWait(
        f"turn-ended-{subagent}.report.2", WaitKind.ON_USER, owed=f"{subagent}.md", subagent=subagent
    )


QUESTION = OpenWait("wait-fixer.ask.1", WaitKind.ON_USER)


def test_the_one_subagent_that_waits_for_a_message_gets_it() -> None:
    assert to_message(items(QUESTION, ended("fixer")), None) == ended("fixer")
    assert to_message(items(ended("fixer"), ended("ci")), "ci") == ended("ci")


def test_nothing_waits_for_a_message() -> None:
    with pytest.raises(CommandError, match=r"nothing waits for a message \(`belay brief s`"):
        to_message(items(QUESTION), None)
    in_cluster = OpenItems(
        session="s",
        approvals=[],
        waits=[QUESTION],
        deliverables=[],
        unknown_outcomes=[],
        style=commands.in_cluster,
    )
    with pytest.raises(CommandError, match="`kubectl belay brief s`"):
        to_message(in_cluster, None)


def test_several_wait_and_none_is_named_or_another_is_named() -> None:
    with pytest.raises(
        CommandError, match=r"several subagents wait for a message in s \(ci, fixer\): name one"
    ):
        to_message(items(ended("fixer"), ended("ci")), None)
    with pytest.raises(CommandError, match=r"docs does not wait for a message in s \(waiting: fixer\)"):
        to_message(items(ended("fixer")), "docs")
