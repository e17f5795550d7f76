"""Attacks run from inside a real local sandbox's `run_command`, as a hostile model would choose them.

The sandboxes sit where `belay run` puts them (`<home>/sessions/<id>/sandboxes/<subagent>/`), next to
a real session record, so every path an attacker could guess is the real one. Each test runs with the
walls (the attack fails) and without them (it succeeds; see conftest.py).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from belay.journal.events import EventDraft, UserInput
from belay.local.runtime import LocalHome
from belay.sandbox.local import LocalSandbox
from tests.security.conftest import WALLS, isolation_for, judge, kill_all, processes_with_argument
from tests.testenv.polling import settle_async, wait_until_async

SESSION = "target"
# From a workspace (<home>/sessions/<id>/sandboxes/<subagent>/workspace-<n>) up to the home.
UP_TO_HOME = "../../../../.."


@dataclass
class Scene:
    mode: str
    home: Path
    secret: str  # planted in the record, the harness's credentials and the victim's workspace
    attacker: LocalSandbox
    victim: LocalSandbox

    async def attack(self, command: str) -> str:
        result = await self.attacker.client.call("run_command", {"command": command, "timeout_s": 60})
        output = result["output"]
        return f"{output['stdout']}\n{output['stderr']}"


async def plant_record(home: LocalHome, secret: str) -> None:
    store = home.open_event_store()
    try:
        await store.append(SESSION, [EventDraft(payload=UserInput(goal=f"the record holds {secret}"))])
    finally:
        await store.close()


@pytest.fixture
async def scene(walls_mode: str, tmp_path: Path) -> AsyncIterator[Scene]:
    home = LocalHome(tmp_path / "home")
    secret = f"planted-{secrets.token_hex(8)}"
    await plant_record(home, secret)
    credentials = home.root / "harness-credentials"  # as ~/.aws/credentials would be
    credentials.write_text(f"aws_secret_access_key = {secret}\n")
    credentials.chmod(0o600)
    base = home.sandboxes_dir(SESSION)
    isolation = isolation_for(walls_mode)
    victim = await LocalSandbox.start(base, "victim", "none", isolation_level=isolation)
    attacker = await LocalSandbox.start(base, "attacker", "none", isolation_level=isolation)
    assert attacker.walls_in_force is (walls_mode == WALLS)
    await victim.client.call("write_file", {"path": "secret.txt", "content": secret})
    scene = Scene(walls_mode, home.root, secret, attacker, victim)
    try:
        yield scene
    finally:
        await scene.attacker.stop()  # the replacement, when a test replaced it
        await victim.stop()


async def test_etc_shadow_is_out_of_reach(scene: Scene) -> None:
    if scene.mode != WALLS and os.geteuid() != 0:
        pytest.skip("/etc/shadow is unreadable to this user even without walls: nothing to show")
    output = await scene.attack("cat /etc/shadow")
    judge(scene.mode, "root:" in output, "read /etc/shadow")


async def test_the_harness_credentials_are_out_of_reach(scene: Scene) -> None:
    output = await scene.attack(f"cat {UP_TO_HOME}/harness-credentials {scene.home}/harness-credentials")
    judge(scene.mode, scene.secret in output, "read the harness's credentials file")


async def test_the_session_record_is_out_of_reach(scene: Scene) -> None:
    output = await scene.attack(
        f"for db in {UP_TO_HOME}/events.db {scene.home}/events.db; do grep -a -o '{scene.secret}' $db; done"
    )
    judge(scene.mode, scene.secret in output, "read the session record")


async def test_the_other_sandbox_token_and_files_are_out_of_reach(scene: Scene) -> None:
    victim = scene.victim.sandbox_dir
    output = await scene.attack(
        f"cat ../../victim/token ../../victim/workspace-1/secret.txt {victim}/token "
        f"{victim}/workspace-1/secret.txt"
    )
    got_token = scene.victim.token in output
    got_file = scene.secret in output
    judge(scene.mode, got_token and got_file, "read the other sandbox's token and workspace")


# The attack scripts below speak HTTP to a sandbox server's Unix socket with this.
UNIX_HTTP = """
import http.client, socket
class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("sandbox")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)
"""

# Runs inside the attacker's sandbox: finds the other sandbox's socket and token where a harness puts
# them and asks that sandbox to write a file, as a command of its own would.
DRIVE_OTHER_SANDBOX = (
    UNIX_HTTP
    + """
import glob, json, sys
tokens = [open(path).read().strip() for d in sys.argv[1:] for path in glob.glob(d + "/token")]
sockets = [path for d in sys.argv[1:] for path in glob.glob(d + "/*.sock") + glob.glob(d + "/run-*/*.sock")]
sockets += glob.glob("/tmp/belay-sbx-*/*.sock")  # where a long socket path goes
for token in tokens:
    for path in sockets:
        connection = UnixConnection(path)
        body = json.dumps({"path": "planted.txt", "content": "written by the other sandbox"})
        headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        try:
            connection.request("POST", "/v1/tools/write_file", body, headers)
            print(path, connection.getresponse().status)
        except OSError as error:
            print(path, error)
print(len(tokens), "tokens,", len(sockets), "sockets")
"""
)


async def test_the_other_sandbox_cannot_be_driven(scene: Scene) -> None:
    victim = scene.victim.sandbox_dir
    await scene.attacker.client.call("write_file", {"path": "drive.py", "content": DRIVE_OTHER_SANDBOX})
    output = await scene.attack(f"python drive.py ../../victim {victim}")
    planted = (scene.victim.files / "planted.txt").exists()
    judge(
        scene.mode, planted, f"write into the other sandbox's workspace through its server ({output.strip()})"
    )


async def test_another_process_environment_is_out_of_reach(scene: Scene) -> None:
    """A process of the harness's side holding a credential in its environment, as the harness does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, "AWS_SECRET_ACCESS_KEY": scene.secret},
    )
    try:
        output = await scene.attack(
            f"for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | grep {scene.secret}"
        )
    finally:
        holder.kill()
        holder.wait()
    judge(scene.mode, scene.secret in output, "read another process's environment through /proc")


# Runs inside the sandbox: everything a command can try to learn its own sandbox's token with (a
# token file, the server's environment, the descriptor its command line names, its memory). Every
# token-shaped string found is tried against the server, and the one it accepts is printed.
STEAL_OWN_TOKEN = (
    UNIX_HTTP
    + """
import glob, os, re
TOKEN = re.compile(rb"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")
def accepted(candidate):
    sockets = glob.glob("/run/belay/*.sock") + glob.glob("../*.sock") + glob.glob("/tmp/belay-sbx-*/*.sock")
    for path in sockets:
        connection = UnixConnection(path)
        try:
            connection.request("GET", "/healthz", headers={"Authorization": "Bearer " + candidate})
            if connection.getresponse().status == 200:
                return True
        except OSError:
            pass
    return False
sources = []
for name in ("../token", "token"):
    try:
        sources.append(open(name, "rb").read())
    except OSError as error:
        print(name, error)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        command_line = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        continue
    if "belay.sandbox.server" not in command_line or int(pid) == os.getpid():
        continue
    named = re.findall(r"/proc/self/fd/[0-9]+", command_line)
    paths = [f"/proc/{pid}/environ"] + [path.replace("self", pid) for path in named]
    for path in paths:
        try:
            sources.append(open(path, "rb").read())
        except OSError as error:
            print(path, error)
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
            for line in maps:
                fields = line.split()
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if fields[1].startswith("rw") and end - start < 64 * 1024 * 1024:
                    try:
                        memory.seek(start)
                        sources.append(memory.read(end - start))
                    except OSError:
                        pass
    except OSError as error:
        print(pid, "memory:", error)
tried = set()
for data in sources:
    for match in TOKEN.findall(data):
        candidate = match.decode()
        if candidate not in tried and len(tried) < 20000:
            tried.add(candidate)
            if accepted(candidate):
                print("token:", candidate)
                raise SystemExit(0)
print("no token among", len(tried), "candidates")
"""
)


async def test_the_sandbox_own_token_is_out_of_reach(scene: Scene) -> None:
    await scene.attacker.client.call("write_file", {"path": "steal.py", "content": STEAL_OWN_TOKEN})
    output = await scene.attack("python steal.py")
    judge(scene.mode, scene.attacker.token in output, "read this sandbox's own token")


@pytest.mark.parametrize("end", ["stop", "replace"])
async def test_no_process_outlives_its_sandbox(scene: Scene, end: str) -> None:
    """A process that leaves the command's session and clears its environment (so neither the
    process group nor the environment marker finds it)."""
    marker = f"{os.getpid() % 1000}.{secrets.randbelow(10**9):09d}"
    await scene.attack(f"env -i setsid sleep 1000{marker} > /dev/null 2>&1 < /dev/null &")
    # The command returns once it has put `env` in the background; the marker is in its command line
    # before `setsid` has left the command's session. Wait until `sleep` runs: only then has it left.
    await wait_until_async(
        lambda: processes_with_argument(marker, program="sleep"),
        "the background process to leave the session",
        timeout=10,
        interval=0.02,
    )
    namespace = scene.attacker.pid_namespace
    if end == "stop":
        await scene.attacker.stop()
    else:
        scene.attacker = await scene.attacker.replace()
    # Killing is asynchronous for processes outside the namespace's first one's reach.
    survivors = await settle_async(
        lambda: processes_with_argument(marker), until=lambda left: not left, timeout=2, interval=0.02
    )
    kill_all(survivors)
    if namespace is not None:
        assert namespace.processes() == []
    judge(scene.mode, bool(survivors), f"a background process outlived {end}()")
