from __future__ import annotations

import hashlib
import os
import stat

import pytest

from belay.sandbox.client import SandboxError
from belay.sandbox.local import LocalSandbox
from belay.sandbox.protocol import MAX_OUTPUT_BYTES
from tests.sandbox.helpers import wait_gone_inside

# Each test here touches only its own paths, so the module shares one sandbox.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def sandbox(shared_sandbox: LocalSandbox) -> LocalSandbox:
    return shared_sandbox


async def test_run_command_string_runs_in_a_shell_in_the_workspace(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call(
        "run_command", {"command": "pwd; echo oops >&2; exit 3", "timeout_s": 30}
    )
    assert result["ok"] is True
    assert result["output"]["exit_code"] == 3
    assert result["output"]["stdout"].strip() == "/workspace"
    assert result["output"]["stderr"].strip() == "oops"


async def test_run_command_list_is_not_interpreted_by_a_shell(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call("run_command", {"command": ["echo", "$HOME", "a;b"], "timeout_s": 30})
    assert result["output"] == {
        "exit_code": 0,
        "stdout": "$HOME a;b\n",
        "stderr": "",
        "timed_out": False,
        "truncated": False,
    }


async def test_run_command_in_a_subdirectory(sandbox: LocalSandbox) -> None:
    await sandbox.client.call("write_file", {"path": "pkg/mod.py", "content": "VALUE = 41 + 1\n"})
    result = await sandbox.client.call(
        "run_command", {"command": "python -c 'import mod; print(mod.VALUE)'", "timeout_s": 30, "cwd": "pkg"}
    )
    assert result["output"]["stdout"] == "42\n"


async def test_run_command_timeout_kills_the_whole_group(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call(
        "run_command", {"command": "sleep 60 & echo $! > sleeper.pid; wait", "timeout_s": 1}
    )
    assert result["ok"] is True
    assert result["output"]["timed_out"] is True
    assert result["output"]["exit_code"] != 0
    assert "timed out" in result["output"]["stderr"]
    sleeper = int((sandbox.files / "sleeper.pid").read_text())
    await wait_gone_inside(sandbox, sleeper)


async def test_missing_program_is_a_result_not_a_crash(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call("run_command", {"command": ["no-such-program-here"], "timeout_s": 5})
    assert result["ok"] is True
    assert result["output"]["exit_code"] == 127


async def test_write_then_read_and_list(sandbox: LocalSandbox) -> None:
    written = await sandbox.client.call(
        "write_file", {"path": "listing/src/a.py", "content": "print('héllo')\n"}
    )
    assert written["ok"] is True
    data = (sandbox.files / "listing/src/a.py").read_bytes()
    assert written["output"]["size"] == len(data)
    assert written["output"]["sha256"] == hashlib.sha256(data).hexdigest()
    read = await sandbox.client.call("read_file", {"path": "listing/src/a.py"})
    assert read == {"ok": True, "output": {"content": "print('héllo')\n"}, "error": None}
    await sandbox.client.call("write_file", {"path": "listing/b.txt", "content": ""})
    listed = await sandbox.client.call("list_files", {"path": "listing"})
    assert listed["output"]["files"] == ["listing/b.txt", "listing/src/a.py"]
    in_src = await sandbox.client.call("list_files", {"path": "listing/src"})
    assert in_src["output"]["files"] == ["listing/src/a.py"]


async def test_write_file_mode_and_overwrite(sandbox: LocalSandbox) -> None:
    await sandbox.client.call(
        "write_file", {"path": "run.sh", "content": "#!/bin/sh\necho ran\n", "mode": 0o755}
    )
    assert stat.S_IMODE(os.stat(sandbox.files / "run.sh").st_mode) == 0o755
    result = await sandbox.client.call("run_command", {"command": "./run.sh", "timeout_s": 10})
    assert result["output"]["stdout"] == "ran\n"
    await sandbox.client.call("write_file", {"path": "run.sh", "content": "#!/bin/sh\necho again\n"})
    assert stat.S_IMODE(os.stat(sandbox.files / "run.sh").st_mode) == 0o755
    assert not [p for p in sandbox.workspace.iterdir() if p.name.endswith(".tmp")]


async def test_reading_a_missing_file_is_a_tool_failure(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call("read_file", {"path": "nope.txt"})
    assert result["ok"] is False
    assert "nope.txt" in result["error"]


async def test_invalid_arguments_are_a_tool_failure(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call("write_file", {"path": "a.txt"})
    assert result["ok"] is False
    assert "content" in result["error"]


async def test_unknown_tool_is_refused(sandbox: LocalSandbox) -> None:
    with pytest.raises(SandboxError, match="unknown sandbox tool") as caught:
        await sandbox.client.call("format_disk", {})
    assert caught.value.status == 404


async def test_output_read_so_far_survives_a_background_process_holding_the_pipes(
    sandbox: LocalSandbox,
) -> None:
    result = await sandbox.client.call(
        "run_command", {"command": "echo before; sleep 30 & echo $! > holder.pid", "timeout_s": 20}
    )
    output = result["output"]
    assert (output["exit_code"], output["timed_out"]) == (0, False)
    assert output["stdout"] == "before\n"
    assert output["truncated"] is True
    assert "background process" in output["stderr"]


async def test_reading_a_binary_file_is_a_clear_tool_failure(sandbox: LocalSandbox) -> None:
    data = b"\xff\xfe\x00binary"
    await sandbox.client.put_file("blob.bin", data, hashlib.sha256(data).hexdigest())
    result = await sandbox.client.call("read_file", {"path": "blob.bin"})
    assert result["ok"] is False
    assert "not UTF-8 text" in result["error"]


async def test_output_above_the_cap_is_cut_and_says_so(sandbox: LocalSandbox) -> None:
    result = await sandbox.client.call(
        "run_command", {"command": f"head -c {MAX_OUTPUT_BYTES + 5000} /dev/zero | tr '\\0' a; echo done >&2"}
    )
    output = result["output"]
    assert output["exit_code"] == 0
    assert output["stdout"] == "a" * MAX_OUTPUT_BYTES
    assert output["stderr"].startswith("done\n")
    assert f"stdout cut at the command output cap of {MAX_OUTPUT_BYTES} bytes" in output["stderr"]
    assert output["truncated"] is True
