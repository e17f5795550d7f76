"""Forged effects: nothing but the harness files a ticket, and reconciliation takes as done only a
ticket carrying the operation's mark.

One session, run once for every test here, by a real `belay run` and `belay resume`:

- `forger` (profile `internet`, so it shares the host's network and reaches the harness's ticket
  service on loopback) lists the tickets and posts one carrying `filer`'s operation id, bare and
  with a made-up mark, without the service's credential. (It is told the service's port, which
  it could find by trying every listening port: the test must not post to other programs' ports.)
- `filer` files a first ticket, waits until the forger is done, then asks for a second one; the
  harness is killed right after recording that request, before its result.
- Tickets naming that operation are then put into the tracker by hand, as someone with access to
  a real tracker could: the operation id alone, a wrong mark, the mark of another session for the
  same id, and the first ticket's genuine mark moved onto this id.
- `belay resume` probes the tracker. While it runs, a local process posts and lists tickets with
  curl and urllib, without the credential. The person then answers the reconciliation.

With the protections every forgery is refused or shown for reconciliation, and each operation has
exactly one real ticket; without the credential check the forgeries are filed, and without the
mark check the resume takes a forged ticket as the filed one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from belay.harness.effect_marks import EffectMarks
from belay.journal.events import Event, OperationOutcomeEvent, ToolResultEvent, WaitEvent
from belay.journal.state import fold
from belay.local.runtime import LocalHome
from belay.local.tickets import Ticket, TicketDraft, add_ticket, load_tickets
from belay.sandbox.local import ServerRecord
from belay.sandbox.walls import WORKSPACE
from tests.belay_cli import completed, kill_group, read_events, run_belay, start_belay, wait_until_stopped
from tests.scripted import write_scripted_session
from tests.testenv.polling import wait_until

SESSION = "forgery"
FIRST = "filer.first.1"
FILE = "filer.file.1"
POINT = f"tool_request:{FILE}"
WAIT_ID = f"reconcile-{FILE}"
RUN_TIMEOUT_S = 300

FORGE = """
import json, socket, sys, time, urllib.error, urllib.request
target, rendezvous = sys.argv[1], sys.argv[2]
while True:
    try:
        port = int(open("port.txt").read())
        break
    except (OSError, ValueError):
        time.sleep(0.05)

def ask(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()

status, listing = ask("GET", "/tickets")
print(f"list {status} {listing[:200]}", flush=True)
for ref in (target, target + "~" + "0" * 64):
    status, answer = ask("POST", "/tickets", {"title": "forged by sandbox forger", "client_ref": ref})
    print(f"forge {ref} {status}", flush=True)
# Tell the filer the forgery is done (abstract sockets are the network namespace's, shared here).
with socket.socket(socket.AF_UNIX) as signal:
    signal.bind("\\0" + rendezvous)
    signal.listen()
    signal.settimeout(120)
    signal.accept()
"""

AWAIT_FORGERY = """
import socket, sys, time
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        socket.socket(socket.AF_UNIX).connect("\\0" + sys.argv[1])
        print("the forger is done")
        break
    except OSError:
        time.sleep(0.05)
"""


def forgery_session(directory: Path, rendezvous: str) -> Path:
    def ticket(title: str) -> dict[str, Any]:
        return {"tool": "create_ticket", "arguments": {"title": title, "body": "filed by the harness"}}

    def script(path: str, content: str, *args: str) -> list[dict[str, Any]]:
        command = ["python", path, *args]
        return [
            {"tool": "write_file", "arguments": {"path": path, "content": content}},
            {"tool": "run_command", "arguments": {"command": command, "timeout_s": 150}},
        ]

    return write_scripted_session(
        directory,
        SESSION,
        "File two tickets while another subagent tries to forge one.",
        [{"name": "forger", "networkProfile": "internet"}, {"name": "filer", "networkProfile": "internet"}],
        {
            "forger": [
                {"id": "forge", "title": "forge", "actions": script("forge.py", FORGE, FILE, rendezvous)}
            ],
            "filer": [
                {"id": "first", "title": "first", "actions": [ticket("the first real ticket")]},
                {"id": "await", "title": "await", "actions": script("wait.py", AWAIT_FORGERY, rendezvous)},
                {"id": "file", "title": "file", "actions": [ticket("the second real ticket")]},
            ],
        },
    )


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process `pid` listens on: its socket descriptors, found in its network's table."""
    inodes = set()
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def ticket_port(process: subprocess.Popen[bytes]) -> int:
    """The port of the ticket service the harness in `process` runs (its only TCP listener)."""
    found: list[int] = []

    def listening() -> bool:
        found[:] = listening_ports(process.pid)
        return bool(found)

    wait_until(listening, "the harness's ticket service to listen", timeout=120, interval=0.05)
    [port] = found
    return port


def forge_from_a_local_process(port: int) -> dict[str, int]:
    """Post and list tickets as another program on the machine would: curl, and Python's urllib."""
    url = f"http://127.0.0.1:{port}/tickets"
    body = json.dumps({"title": "forged by a local process", "client_ref": FILE})
    statuses = {}
    if shutil.which("curl"):
        for name, extra in [("curl post", ["-X", "POST", "-d", body]), ("curl list", [])]:
            curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"]
            result = subprocess.run(
                [*curl, "-H", "Content-Type: application/json", *extra, url],
                capture_output=True,
                text=True,
                timeout=30,
            )
            statuses[name] = int(result.stdout)
    code = (
        "import sys, urllib.error, urllib.request\n"
        "for data in (sys.argv[2].encode(), None):\n"
        "    request = urllib.request.Request(sys.argv[1], data=data,"
        " headers={'Content-Type': 'application/json', 'Authorization': 'Bearer guessed'})\n"
        "    try:\n"
        "        print(urllib.request.urlopen(request, timeout=10).status)\n"
        "    except urllib.error.HTTPError as error:\n"
        "        print(error.code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, url, body], capture_output=True, text=True, timeout=30
    )
    post, listing = result.stdout.split()
    statuses["urllib post"], statuses["urllib list"] = int(post), int(listing)
    return statuses


@dataclass
class Outcome:
    home: Path
    events: list[Event]
    tickets: list[Ticket]
    planted: dict[str, str]  # what each planted ticket's reference is, by its id
    local_statuses: dict[str, int]
    waited: bool  # the resume waited on the person for the forged operation
    brief_while_waiting: str
    resumed: int | None

    def output_of(self, operation_id: str) -> str:
        for event in self.events:
            if isinstance(event, ToolResultEvent) and event.payload.operation_id == operation_id:
                output = event.payload.output or {}
                if not output.get("stdout"):  # say why, should an assertion on it fail
                    print(f"{operation_id}: {event.payload.model_dump_json()[:2000]}")
                return str(output.get("stdout", ""))
        raise AssertionError(f"no result for {operation_id}")

    def genuine(self, operation_id: str) -> list[Ticket]:
        marks = EffectMarks(LocalHome(self.home).effect_key(), SESSION)
        return [t for t in self.tickets if marks.is_marked(t.client_ref, operation_id)]


class ForgerTeller:
    """Writes the ticket service's port into every workspace the forger gets while a run lasts.

    Under load a sandbox whose start passes its timeout is started again on a fresh workspace
    (`workspace-2`, in the first run as in the resume): each one the forger could run in is told,
    as soon as it exists and again whenever its port file says otherwise (a restore may bring back
    the old one), so the forger never waits on a port written where it no longer runs."""

    def __init__(self, home: Path, port: int) -> None:
        self.forger_dir = LocalHome(home).sandboxes_dir(SESSION) / "forger"
        self.port = str(port)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.tell, daemon=True)

    def __enter__(self) -> ForgerTeller:
        wait_until(self.workspaces, "the forger's workspace", timeout=120)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join()

    def workspaces(self) -> list[Path]:
        """Each workspace the forger may run in, as the host reaches it: without walls its
        directory; in walls the sandbox's own disk, through its first process (server.json)."""
        if not self.forger_dir.is_dir():
            return []
        found = sorted(self.forger_dir.glob("workspace-*"))
        with contextlib.suppress(OSError, ValueError):
            record = ServerRecord.model_validate_json((self.forger_dir / "server.json").read_text())
            if record.first_pid is not None:
                found.append(Path(f"/proc/{record.first_pid}/root{WORKSPACE}"))
        return found

    def tell(self) -> None:
        while not self.stopped.is_set():
            for workspace in self.workspaces():
                port_file = workspace / "port.txt"
                with contextlib.suppress(OSError):  # a superseded workspace may be gone
                    if not port_file.is_file() or port_file.read_text() != self.port:
                        port_file.write_text(self.port)
                        port_file.chmod(0o644)  # for the sandbox's uid, whatever the umask
            self.stopped.wait(0.05)


def plant_forgeries(home: Path) -> dict[str, str]:
    """Tickets naming FILE without its mark, written straight into the tracker."""
    state_file = LocalHome(home).tickets_file(SESSION)
    key = LocalHome(home).effect_key()
    [first] = [t for t in load_tickets(state_file) if t.title == "the first real ticket"]
    assert first.client_ref is not None
    references = [
        FILE,
        f"{FILE}~{'0' * 64}",
        EffectMarks(key, "another-session").reference(FILE),
        f"{FILE}~{first.client_ref.rsplit('~', 1)[1]}",
    ]
    planted = {}
    for reference in references:
        ticket = add_ticket(state_file, TicketDraft(title="forged in the tracker", client_ref=reference))
        planted[ticket.id] = reference
    return planted


def run_forgery_session(workdir: Path) -> Outcome:
    home = workdir / "home"
    manifest = forgery_session(workdir / "manifest", f"belay-forgery-{secrets.token_hex(6)}")
    run = start_belay(home, "run", "--quiet", str(manifest), stop_after=POINT)
    try:
        with ForgerTeller(home, ticket_port(run)):
            wait_until_stopped(run, POINT, timeout=RUN_TIMEOUT_S)
    finally:
        kill_group(run)  # the harness dies before the second ticket's result
    planted = plant_forgeries(home)

    resume = start_belay(home, "resume", "--quiet", SESSION)
    local_statuses: dict[str, int] = {}
    brief = ""
    teller = None
    try:
        port = ticket_port(resume)
        # The restored forger runs its recorded commands again in a fresh workspace: it is told the
        # new port, and forges again.
        teller = ForgerTeller(home, port).__enter__()
        local_statuses = forge_from_a_local_process(port)

        def settled() -> bool:
            state = fold(read_events(home, SESSION))
            return WAIT_ID in state.waits or state.operations[FILE].has_result

        wait_until(
            settled, "the resume to settle the killed request", timeout=RUN_TIMEOUT_S, while_running=resume
        )
        waited = WAIT_ID in fold(read_events(home, SESSION)).waits
        if waited:
            brief = run_belay(home, "brief", SESSION).stdout
            answer = run_belay(home, "reject", SESSION, WAIT_ID, "-m", "those tickets were forged")
            assert answer.returncode == 0, answer.stdout + answer.stderr
        resumed = resume.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if teller is not None:
            teller.__exit__()
        if resume.poll() is None:
            kill_group(resume)
    tickets = load_tickets(LocalHome(home).tickets_file(SESSION))
    return Outcome(home, read_events(home, SESSION), tickets, planted, local_statuses, waited, brief, resumed)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    yield run_forgery_session(tmp_path_factory.mktemp("forgery"))


def test_a_sandbox_cannot_read_or_file_tickets(outcome: Outcome) -> None:
    output = outcome.output_of("forger.forge.2")
    assert output.startswith("list 401"), output
    assert f"forge {FILE} 401" in output and f"forge {FILE}~{'0' * 64} 401" in output, output
    assert "the first real ticket" not in output  # the listing was refused, not merely empty
    assert not [t for t in outcome.tickets if t.title == "forged by sandbox forger"]


def test_a_local_process_cannot_read_or_file_tickets(outcome: Outcome) -> None:
    assert outcome.local_statuses and set(outcome.local_statuses.values()) == {401}, outcome.local_statuses
    assert not [t for t in outcome.tickets if t.title == "forged by a local process"]


def test_a_ticket_without_the_mark_is_shown_for_reconciliation_never_taken_as_done(outcome: Outcome) -> None:
    by_probe = [
        e.payload
        for e in outcome.events
        if isinstance(e, OperationOutcomeEvent) and e.payload.operation_id == FILE and e.payload.by == "probe"
    ]
    assert not [o for o in by_probe if o.succeeded], by_probe
    assert outcome.waited, by_probe
    wait = next(
        e.payload for e in outcome.events if isinstance(e, WaitEvent) and e.payload.wait_id == WAIT_ID
    )
    for ticket_id in outcome.planted:
        assert ticket_id in wait.reason
    assert "without the harness's mark" in wait.reason and "not taken as its effect" in wait.reason
    # What the person reads: the operation to reconcile, and why the tickets found are not taken.
    brief = outcome.brief_while_waiting.splitlines()
    [waiting] = [line for line in brief if f"reconciliation {FILE}" in line]
    assert "without the harness's mark" in waiting and all(t in waiting for t in outcome.planted), waiting


def test_each_operation_has_exactly_one_real_ticket(outcome: Outcome) -> None:
    assert outcome.resumed == 0 and completed(outcome.events)
    assert [t.title for t in outcome.genuine(FIRST)] == ["the first real ticket"]  # not filed again
    assert [t.title for t in outcome.genuine(FILE)] == [
        "the second real ticket"
    ]  # filed once, after the answer
    [result] = [
        e.payload for e in outcome.events if isinstance(e, ToolResultEvent) and e.payload.operation_id == FILE
    ]
    assert result.ok and result.output["title"] == "the second real ticket"


def test_the_mark_is_made_under_a_key_only_the_home_holds(outcome: Outcome) -> None:
    key_file = LocalHome(outcome.home).effect_key_file
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text().strip()
    # No sandbox saw it: not in any workspace, nor in what any tool answered.
    for path in LocalHome(outcome.home).sandboxes_dir(SESSION).rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert key not in json.dumps([e.model_dump(mode="json") for e in outcome.events])
