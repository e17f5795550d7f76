"""A coordinator and its child sessions on one machine, no cluster, driven as a person drives them:
`belay run` of the coordinator starts each child in the same home, in a harness process of its
own, and collects their deliverables as its own artifacts; the coordinator's own page lists each
collected deliverable ready for review with the command that fetches it, once collected (a child
not done yet, or reopened by an amend, has nothing there); `belay objective` shows each child as
it stands; a child whose harness is killed is shown interrupted while the others move on, and
`belay resume` of it goes on from its record without repeating a completed step of any child."""

from __future__ import annotations

import asyncio
import html
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

from belay.local.liveness import holder_process
from belay.local.runtime import LocalHome
from tests.belay_cli import (
    belay_command,
    belay_environment,
    read_events,
    run_belay,
    start_belay,
    steps_run_twice,
)
from tests.testenv.polling import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
RELEASE_NOTES = REPO_ROOT / "examples/release-notes/session.yaml"


def lease_holder(home: Path, session_id: str) -> str | None:
    async def read() -> str | None:
        store = LocalHome(home).open_event_store()
        try:
            lease = await store.current_lease(session_id)
        finally:
            await store.close()
        return lease.holder if lease is not None else None

    return asyncio.run(read())


def objective(home: Path, name: str) -> dict[str, Any]:
    shown = run_belay(home, "objective", name, "--json")
    assert shown.returncode == 0, shown.stderr
    view: dict[str, Any] = json.loads(shown.stdout)
    return view


def rows(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["session"]: row for row in view["sessions"]}


def brief(home: Path, session_id: str) -> dict[str, Any]:
    shown = run_belay(home, "brief", session_id, "--json")
    assert shown.returncode == 0, shown.stderr
    page: dict[str, Any] = json.loads(shown.stdout)
    return page


def reviews(home: Path, session_id: str) -> dict[str, dict[str, Any]]:
    """What the session's page lists under "Ready for review", by name."""
    return {review["name"]: review for review in brief(home, session_id)["ready_for_review"]}


def ready_names(home: Path, session_id: str, section: str = "ready_for_review") -> list[str]:
    """The names (ids) a section of the session's page lists; none before the session exists."""
    shown = run_belay(home, "brief", session_id, "--json")
    if shown.returncode != 0:
        return []
    return [item.get("name") or item["id"] for item in json.loads(shown.stdout)[section]]


def run_as_printed(home: Path, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` exactly as a page printed it, in this home, from `cwd` (where a download writes)."""
    words = shlex.split(command)
    assert words[0] == "belay", command
    return subprocess.run(
        belay_command(home, *words[1:]),
        cwd=cwd,
        capture_output=True,
        text=True,
        env=belay_environment(None),
        timeout=60,
        check=False,
    )


def deliverable_sha256(home: Path, session_id: str, name: str) -> str:
    """The bytes the session last published as `name`, by their hash, from its record."""
    published = [
        e.payload.ref.sha256
        for e in read_events(home, session_id)
        if e.type == "artifact" and e.payload.name == name and e.payload.deliverable
    ]
    assert published, (session_id, name)
    return published[-1]


def test_the_release_notes_run_on_one_machine_and_the_coordinators_page_lists_what_it_collected(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", str(RELEASE_NOTES))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Session release-notes: Succeeded" in ran.stdout
    assert "child session notes-parser started" in ran.stdout

    # Each child ran in a harness process of its own, none of them the coordinator's.
    holders = {name: lease_holder(home, name) for name in ("release-notes", "notes-parser", "notes-docs")}
    assert len({holder_process(h or "") for h in holders.values()}) == 3, holders

    view = objective(home, "release-notes")
    assert view["done"] is True
    assert {r["session"]: (r["part"], r["parent"]) for r in view["sessions"]} == {
        "release-notes": (None, None),
        "notes-parser": ("parser", "release-notes"),
        "notes-docs": ("docs", "release-notes"),
    }
    # What the whole waits on: the review of what the coordinator collected, fetched from it.
    assert sorted((w["session"], w["kind"], w["command"]) for w in view["waits_on"]) == [
        (
            "release-notes",
            "review",
            "belay artifacts get release-notes notes-docs/docs.md -o notes-docs/docs.md",
        ),
        (
            "release-notes",
            "review",
            "belay artifacts get release-notes notes-parser/parser.md -o notes-parser/parser.md",
        ),
    ]

    # The coordinator's own page says where the result is: each child's deliverable, collected, is
    # ready for review there, fetched from the coordinator by the command printed (as a session's
    # own deliverable is) and turned down there too (which reopens the child whose step made it).
    ready = reviews(home, "release-notes")
    assert sorted(ready) == ["notes-docs/docs.md", "notes-parser/parser.md"]
    for child, name, text in (
        ("notes-parser", "parser.md", "## Parser"),
        ("notes-docs", "docs.md", "## Documentation"),
    ):
        assert steps_run_twice(read_events(home, child)) == []
        review = ready[f"{child}/{name}"]
        assert review["command"] == f"belay artifacts get release-notes {child}/{name} -o {child}/{name}"
        assert review["alternative"] == f'belay reject release-notes {child}/{name} --reason "..."'
        assert review["sha256"] == deliverable_sha256(home, child, name)
        fetched = run_as_printed(home, review["command"], cwd=tmp_path)
        assert fetched.returncode == 0, fetched.stderr
        assert (tmp_path / child / name).read_text().startswith(text)

    text = run_belay(home, "brief", "release-notes").stdout
    section = text[text.index("Ready for review\n") : text.index("Hypotheses")]
    assert "nothing" not in section, section
    for child, name in (("notes-parser", "parser.md"), ("notes-docs", "docs.md")):
        assert f"download: belay artifacts get release-notes {child}/{name} -o {child}/{name}" in section, (
            section
        )
    listed = json.loads(run_belay(home, "artifacts", "release-notes", "--json").stdout)
    assert {row["name"]: row["ready_for_review"] for row in listed} == dict.fromkeys(ready, True)

    # The report's briefing is the same page.
    report = tmp_path / "report.html"
    written = run_belay(home, "report", "release-notes", "-o", str(report))
    assert written.returncode == 0, written.stderr
    aside = re.search(r"<h2>Briefing</h2>(.*?)</aside>", report.read_text(), re.S)
    assert aside is not None
    briefing = html.unescape(aside.group(1))
    assert (
        "download: belay artifacts get release-notes notes-parser/parser.md -o notes-parser/parser.md"
        in briefing
    )


# A coordinator of two children: `quick` publishes its note at once; `held` first asks a person.
def held_plan(name: str, ask: bool) -> dict[str, Any]:
    ask_first = [{"tool": "wait_on_user", "arguments": {"reason": "Is the wording right?"}}] if ask else []
    actions = [
        *ask_first,
        {"tool": "write_file", "arguments": {"path": f"out/{name}.md", "content": f"{name}\n"}},
        {"tool": "publish_deliverable", "arguments": {"path": f"out/{name}.md", "name": f"{name}.md"}},
    ]
    return {
        "subagents": {"writer": {"steps": [{"id": "write", "title": f"Write {name}", "actions": actions}]}}
    }


def write_objective(directory: Path, name: str, goal: str, plans: dict[str, dict[str, Any]]) -> Path:
    """A coordinator `name` of objective `name` that starts one child session per entry of `plans`
    (its scripted plan, writing `<child>.md`), then waits for each: its manifest's path."""
    directory.mkdir(parents=True)
    for child, plan in plans.items():
        (directory / f"{child}.yaml").write_text(yaml.safe_dump(plan))
    starts = [
        {
            "tool": "start_session",
            "arguments": {
                "name": child,
                "part": child,
                "goal": f"Write {child}.md.",
                "plan": f"{child}.yaml",
                "deliverable": f"{child}.md",
            },
        }
        for child in plans
    ]
    awaits = [{"tool": "await_session", "arguments": {"name": child}} for child in plans]
    steps = [
        {"id": "delegate", "title": "Start the parts", "actions": starts},
        {"id": "collect", "title": "Wait for the parts", "actions": awaits},
    ]
    (directory / "coordinator.yaml").write_text(yaml.safe_dump({"subagents": {"writer": {"steps": steps}}}))
    manifest = {
        "apiVersion": "belay.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name, "labels": {"belay.dev/objective": name}},
        "spec": {
            "request": {"goal": goal},
            "executor": {"type": "scripted", "plan": "coordinator.yaml"},
            "subagents": [{"name": "writer", "networkProfile": "none"}],
        },
    }
    (directory / "session.yaml").write_text(yaml.safe_dump(manifest))
    return directory / "session.yaml"


def write_pair(directory: Path) -> Path:
    plans = {"quick": held_plan("quick", False), "held": held_plan("held", True)}
    return write_objective(directory, "pair", "Two parts, one child session each.", plans)


def test_a_child_not_done_yet_has_nothing_ready_for_review_on_the_coordinators_page(tmp_path: Path) -> None:
    home = tmp_path / "home"
    coordinator = start_belay(home, "run", str(write_pair(tmp_path / "pair")))
    try:
        wait_until(
            lambda: any(
                e.type == "artifact" and e.payload.name == "quick/quick.md" for e in read_events(home, "pair")
            ),
            "the quick child's note collected",
            timeout=60,
            while_running=coordinator,
        )
        wait_until(
            lambda: ready_names(home, "held", section="waiting_on_you") != [],
            "the held child waiting on a person",
            timeout=60,
            while_running=coordinator,
        )
        page = brief(home, "pair")
        assert [r["name"] for r in page["ready_for_review"]] == ["quick/quick.md"]
        assert [e["condition"] for e in page["waiting_on_external"]] == ["session:held"]
        text = run_belay(home, "brief", "pair").stdout
        assert "belay artifacts get pair quick/quick.md -o quick/quick.md" in text
        assert "held/" not in text[text.index("Ready for review\n") :], text

        [question] = brief(home, "held")["waiting_on_you"]
        answered = run_belay(home, "answer", "held", question["id"], "yes")
        assert answered.returncode == 0, answered.stderr
        assert coordinator.wait(timeout=120) == 0
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    ready = reviews(home, "pair")
    assert sorted(ready) == ["held/held.md", "quick/quick.md"]
    assert ready["held/held.md"]["sha256"] == deliverable_sha256(home, "held", "held.md")


# Three children under one coordinator; each writes a first file, then decides its second through a
# slow model call (`latency_s`): `fast` is killed there, the others are still deciding.
def part_plan(name: str, latency_s: float) -> dict[str, Any]:
    return {
        "subagents": {
            "writer": {
                "steps": [
                    {
                        "id": "first",
                        "title": f"The first half of {name}",
                        "actions": [
                            {"tool": "write_file", "arguments": {"path": "out/a.md", "content": name}}
                        ],
                    },
                    {
                        "id": "second",
                        "title": f"The second half of {name}",
                        "actions": [
                            {
                                "tool": "write_file",
                                "latency_s": latency_s,
                                "arguments": {"path": f"out/{name}.md", "content": f"{name}\n"},
                            },
                            {
                                "tool": "publish_deliverable",
                                "arguments": {"path": f"out/{name}.md", "name": f"{name}.md"},
                            },
                        ],
                    },
                ]
            }
        }
    }


CHILDREN = {"fast": 2.0, "slow-a": 8.0, "slow-b": 8.0}


def write_coordinator(directory: Path) -> Path:
    plans = {name: part_plan(name, latency) for name, latency in CHILDREN.items()}
    return write_objective(directory, "trio", "Three parts, one child session each.", plans)


def step_done(home: Path, session_id: str, task: str) -> bool:
    return any(
        e.type == "task" and e.payload.task_id == task and e.payload.status in ("done", "verified")
        for e in read_events(home, session_id)
    )


def test_a_killed_child_is_interrupted_while_the_others_move_and_its_resume_repeats_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    coordinator = start_belay(home, "run", str(write_coordinator(tmp_path / "trio")))
    try:
        wait_until(
            lambda: step_done(home, "fast", "writer/first"),
            "the fast child's first step",
            timeout=60,
            while_running=coordinator,
        )
        holder = lease_holder(home, "fast")
        process = holder_process(holder or "")
        assert process is not None, holder
        subprocess.run(["kill", "-9", str(process[0])], check=True)
        wait_until(
            lambda: rows(objective(home, "trio"))["fast"]["bucket"] == "interrupted",
            "the killed child shown interrupted",
            timeout=30,
        )
        shown = rows(objective(home, "trio"))
        assert shown["fast"]["command"] == "belay resume fast", shown["fast"]
        assert {shown[n]["bucket"] for n in ("slow-a", "slow-b")} == {"moving"}, shown
        assert shown["trio"]["bucket"] == "on_external", shown["trio"]  # on its children
        text = run_belay(home, "objective", "trio").stdout
        assert "interrupted Interrupted in fast: belay resume fast" in text, text

        resumed = run_belay(home, "resume", "fast")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert coordinator.wait(timeout=120) == 0
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    for session_id in ("trio", *CHILDREN):
        assert steps_run_twice(read_events(home, session_id)) == [], session_id
    view = objective(home, "trio")
    assert view["done"] is True, view
    assert sorted(rows(view)["trio"]["deliverables"]) == sorted(f"{n}/{n}.md" for n in CHILDREN)


def test_an_amend_of_the_coordinators_request_reopens_exactly_the_child_whose_part_changed(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(RELEASE_NOTES))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    docs_before = read_events(home, "notes-docs")

    new_part = "the parser fix, with its regression test"
    amended = run_belay(home, "amend", "release-notes", "--part", f"parser={new_part}")
    assert amended.returncode == 0, amended.stderr
    assert "child sessions reopened: notes-parser (part parser); the other children stand" in amended.stdout
    shown = rows(objective(home, "release-notes"))
    assert shown["notes-docs"]["bucket"] == "succeeded", shown["notes-docs"]
    assert shown["notes-parser"]["bucket"] != "succeeded" and shown["notes-parser"]["deliverables"] == []
    # The note the reopened child delivered before no longer stands: not ready for review.
    assert sorted(reviews(home, "release-notes")) == ["notes-docs/docs.md"]
    [change] = [e.payload for e in read_events(home, "notes-parser") if e.type == "scope_change"]
    assert change.changed_parts == {"parser": new_part}, change

    resumed = run_belay(home, "resume", "--quiet", "release-notes")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert read_events(home, "notes-docs") == docs_before  # it stood: not a single event more
    parser = read_events(home, "notes-parser")
    rounds = [
        e
        for e in parser
        if e.type == "task" and e.payload.task_id == "writer/write" and e.payload.status == "verified"
    ]
    assert len(rounds) == 2, rounds  # its step, done again for the changed part
    view = objective(home, "release-notes")
    assert view["done"] is True, view
    assert sorted(rows(view)["release-notes"]["deliverables"]) == [
        "notes-docs/docs.md",
        "notes-parser/parser.md",
    ]
    # Collected again: the note of the child's second round is ready for review.
    ready = reviews(home, "release-notes")
    assert sorted(ready) == ["notes-docs/docs.md", "notes-parser/parser.md"]
    again = deliverable_sha256(home, "notes-parser", "parser.md")
    assert ready["notes-parser/parser.md"]["sha256"] == again


def test_turning_down_a_collected_note_as_printed_redoes_its_child_and_collects_the_new_note(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(RELEASE_NOTES))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    docs_before = read_events(home, "notes-docs")
    rejected_sha = deliverable_sha256(home, "notes-parser", "parser.md")

    # Turned down by the command the coordinator's page prints, exactly, with a reason.
    printed = reviews(home, "release-notes")["notes-parser/parser.md"]["alternative"]
    assert printed == 'belay reject release-notes notes-parser/parser.md --reason "..."'
    reason = "say which versions the fix reaches"
    rejected = run_as_printed(home, printed.replace('"..."', shlex.quote(reason)), cwd=tmp_path)
    assert rejected.returncode == 0, rejected.stderr
    assert "child session notes-parser runs again with your reason" in rejected.stdout, rejected.stdout

    # At once: the rejected bytes are no longer ready for review; the page says why and what next.
    assert sorted(reviews(home, "release-notes")) == ["notes-docs/docs.md"]
    page = brief(home, "release-notes")
    [invalid] = [i for i in page["items"] if i["id"] == "notes-parser/parser.md"]
    assert invalid["state"] == "invalid", invalid
    assert "child session notes-parser runs again" in invalid["summary"], invalid
    assert reason in invalid["summary"], invalid
    text = run_belay(home, "brief", "release-notes").stdout
    assert "reopened child session notes-parser: it runs again with the reason" in text, text
    assert "download: belay artifacts get release-notes notes-parser/" not in text, text
    [next_command] = re.findall(r"^\s+run: (belay .*)$", text, re.M)
    assert next_command == "belay resume release-notes", text
    # The child was told why, in its own record: its step reopened by the rejection.
    [told] = [e.payload for e in read_events(home, "notes-parser") if e.type == "rejection"]
    assert (told.name, told.sha256, told.reason) == ("parser.md", rejected_sha, reason)

    resumed = run_as_printed(home, next_command + " --quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert read_events(home, "notes-docs") == docs_before  # not a single event more
    parser = read_events(home, "notes-parser")
    # Of the children, only the rejected step ran again (as the plan's variant for a rejection
    # says); of the coordinator, only the step that waited for it and collected its note.
    assert steps_run_twice(parser) == ["step writer/write completed 2 times"]
    assert steps_run_twice(read_events(home, "release-notes")) == ["step writer/collect completed 2 times"]
    again = deliverable_sha256(home, "notes-parser", "parser.md")
    assert again != rejected_sha
    ready = reviews(home, "release-notes")
    assert sorted(ready) == ["notes-docs/docs.md", "notes-parser/parser.md"]
    assert ready["notes-parser/parser.md"]["sha256"] == again
    fetched = run_as_printed(home, ready["notes-parser/parser.md"]["command"], cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    assert "every version from 1.4 on" in (tmp_path / "notes-parser" / "parser.md").read_text()
    assert objective(home, "release-notes")["done"] is True


def test_turning_down_a_collected_note_in_its_child_is_the_same_as_at_the_coordinator(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ran = run_belay(home, "run", "--quiet", str(RELEASE_NOTES))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    docs_before = read_events(home, "notes-docs")
    rejected = run_belay(home, "reject", "notes-parser", "parser.md", "--reason", "name the versions")
    assert rejected.returncode == 0, rejected.stderr
    assert "rejected notes-parser/parser.md" in rejected.stdout, rejected.stdout
    assert "continue with `belay resume release-notes`" in rejected.stdout, rejected.stdout
    # Recorded at the coordinator, whose page stops listing the bytes at once, and in the child.
    assert sorted(reviews(home, "release-notes")) == ["notes-docs/docs.md"]
    [at_coordinator] = [e.payload for e in read_events(home, "release-notes") if e.type == "rejection"]
    assert at_coordinator.name == "notes-parser/parser.md"
    [in_child] = [e.payload for e in read_events(home, "notes-parser") if e.type == "rejection"]
    assert (in_child.name, in_child.reason) == ("parser.md", "name the versions")
    # A second rejection of the same bytes, at either end, records nothing more.
    again = run_belay(home, "reject", "release-notes", "notes-parser/parser.md", "--reason", "again")
    assert again.returncode != 0 and "is not a published deliverable now" in again.stderr, again.stderr

    resumed = run_belay(home, "resume", "--quiet", "release-notes")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert read_events(home, "notes-docs") == docs_before
    ready = reviews(home, "release-notes")
    assert sorted(ready) == ["notes-docs/docs.md", "notes-parser/parser.md"]
    assert ready["notes-parser/parser.md"]["sha256"] == deliverable_sha256(home, "notes-parser", "parser.md")
    assert ready["notes-parser/parser.md"]["sha256"] != at_coordinator.sha256
