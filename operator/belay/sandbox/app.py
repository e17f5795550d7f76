"""The sandbox server's HTTP application (see `belay.sandbox.server` for the command line)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from belay import lifetime
from belay.sandbox import isolation, limits, mcp_stdio, walled_exec, workspace
from belay.sandbox.protocol import (
    CLAIM_PATH,
    INSTANCE_ENV,
    INSTANCE_HEADER,
    INSTANCE_MISMATCH_STATUS,
    MAX_COMMAND_BYTES,
    MODE_HEADER,
    NOT_CLAIMABLE_RULE,
    REFUSED_STATUS,
    SHA256_HEADER,
    STOPPING_STATUS,
    ClaimRequest,
    ErrorBody,
    Health,
    ListFilesArgs,
    ListFilesOutput,
    ManifestRequest,
    ReadFileArgs,
    ReadFileOutput,
    ReadyFile,
    RunCommandArgs,
    RunCommandOutput,
    TooLargeOutput,
    ToolResponse,
    WriteFileArgs,
    WriteFileOutput,
    command_size,
)
from belay.stores.base import UnsafePath

# A JSON request (a tool call, a manifest) is read whole: this bounds what one request can make
# the server hold. A larger file goes through PUT /v1/files, which streams.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# One file put: streamed to disk as it arrives, refused once it passes this.
MAX_FILE_BYTES = workspace.MAX_FILE_BYTES
# A file put is written where it will stay, under a hidden temporary name, in pieces of this size.
STAGE_CHUNK_BYTES = 1024 * 1024
# After a timeout kill, how long to wait for pipes held open by processes that left the group.
DRAIN_AFTER_KILL_S = 2.0


class BinaryContent(ValueError):
    """read_file was asked for bytes that are not text."""


class CommandTooLong(ValueError):
    """run_command was given a command above MAX_COMMAND_BYTES."""


class WorkspaceFull(ValueError):
    """write_file would take the workspace past its disk figure."""


class WallReached(Exception):
    """A command ran into one of the sandbox's resource walls: the call fails with the trip's
    message, and what the command printed goes with it."""

    def __init__(self, trip: limits.Trip, output: RunCommandOutput) -> None:
        super().__init__(trip.message)
        self.trip = trip
        self.output = output


# Failures that are the tool's answer to bad arguments, not a server fault.
TOOL_ERRORS = (
    UnsafePath,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    BinaryContent,
    CommandTooLong,
    WorkspaceFull,
)


def too_large(limit: int) -> web.Response:
    return json_error(
        413,
        f"request body above the sandbox's limit of {limit} bytes; a large file goes in with PUT /v1/files "
        f"(at most {MAX_FILE_BYTES} bytes)",
    )


def json_error(status: int, message: str) -> web.Response:
    return web.json_response(ErrorBody(error=message).model_dump(), status=status)


def refused(error: workspace.WorkspaceRefusal) -> web.Response:
    body = ErrorBody(error=str(error), rule=error.rule, path=error.path)
    return web.json_response(body.model_dump(), status=REFUSED_STATUS)


def out_of_space(name: str, error: OSError) -> workspace.WorkspaceRefusal | None:
    """A write that failed because the workspace is full or over its quota, as a refusal."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return workspace.refusal(name, "quota")
    return None


class CapturedOutput:
    """One stream's output, kept up to a limit. Filled as it arrives, so what was read survives
    when the reader has to be abandoned."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False

    async def read_all(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode(errors="replace")


async def wait_for_exit(process: asyncio.subprocess.Process) -> int:
    """The exit status, as soon as the process exits. `Process.wait()` alone also waits for its
    pipes to close, which a background child can keep open long after the command itself ended;
    `returncode` is set at exit, so it is checked alongside."""
    waiter = asyncio.ensure_future(process.wait())
    try:
        while not waiter.done() and process.returncode is None:
            await asyncio.wait({waiter}, timeout=0.05)
    finally:
        if not waiter.done():
            waiter.cancel()
    assert process.returncode is not None
    return process.returncode


class SandboxServer:
    """`token`: the bearer every request needs. A pool sandbox starts without one and with
    `claim_key_sha256`: it refuses everything until a claim with that key gives it its token."""

    def __init__(
        self,
        root: Path,
        token: str | None,
        profile: str,
        report: isolation.IsolationReport,
        instance: str | None = None,
        walls: limits.Walls | None = None,
        claim_key_sha256: str | None = None,
    ) -> None:
        if token is None and claim_key_sha256 is None:
            raise ValueError("a sandbox server needs a token, or the claim key that gives it one")
        self.root = root
        self.walls = walls or limits.Walls(limits.Limits(), root)
        self.instance = instance or uuid.uuid4().hex
        self.token = token
        self.claim_key_sha256 = claim_key_sha256
        self.profile = profile
        self.report = report
        self.running_groups: set[int] = set()
        # Commands being spawned: until each one's pid is known, no ended child is reaped.
        self.spawning = 0
        # Told to stop: requests already running may finish, new ones are refused.
        self.stopping = False
        self.requests_running = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.tools: dict[str, tuple[type[BaseModel], Callable[[Any], Awaitable[BaseModel]]]] = {
            "run_command": (RunCommandArgs, self.run_command),
            "read_file": (ReadFileArgs, self.read_file),
            "write_file": (WriteFileArgs, self.write_file),
            "list_files": (ListFilesArgs, self.list_files),
            "mcp_list": (mcp_stdio.McpListArgs, self.mcp_list),
            "mcp_call": (mcp_stdio.McpCallArgs, self.mcp_call),
        }

    # ---------------------------------------------------------------------------------------- app

    def app(self) -> web.Application:
        application = web.Application(
            middlewares=[self.require_token, self.count_requests, self.limit_body],
            client_max_size=MAX_REQUEST_BYTES,
        )
        application.router.add_get("/healthz", self.health)
        application.router.add_post(CLAIM_PATH, self.claim)
        application.router.add_post("/v1/tools/{tool}", self.call_tool)
        # Any character a file name may hold, newline included (`.` would stop at one and answer 404).
        application.router.add_put("/v1/files/{path:[\\s\\S]+}", self.put_file)
        application.router.add_get("/v1/files/{path:[\\s\\S]+}", self.get_file)
        application.router.add_post("/v1/manifest", self.manifest)
        return application

    @web.middleware
    async def require_token(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "POST" and request.path == CLAIM_PATH:
            return await handler(request)  # authenticated by its claim key, below
        if self.token is None:
            return json_error(401, "missing or wrong bearer token: this sandbox takes none before its claim")
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return json_error(401, "missing or wrong bearer token")
        meant_for = request.headers.get(INSTANCE_HEADER)
        if meant_for is not None and meant_for != self.instance:
            return json_error(
                INSTANCE_MISMATCH_STATUS,
                f"this is sandbox instance {self.instance}; the request was meant for {meant_for}",
            )
        return await handler(request)

    @web.middleware
    async def count_requests(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Requests running now, so a stop waits for them; once stopping, none is taken, not even a
        health check: a harness that finds its sandbox stopping waits for another one."""
        if self.stopping:
            return json_error(STOPPING_STATUS, "the sandbox is stopping; it takes no new request")
        self.requests_running += 1
        self.idle.clear()
        try:
            return await handler(request)
        finally:
            self.requests_running -= 1
            if self.requests_running == 0:
                self.idle.set()

    async def stop(self, drain_s: float) -> None:
        """Refuse new requests, let the running ones finish for up to `drain_s`, then kill every
        process a command started, wherever it went (its own session, a double fork): as a
        subreaper (belay.lifetime) the server is the parent of every orphan among them."""
        self.stopping = True
        if drain_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), drain_s)
        self.kill_all_commands()
        await asyncio.to_thread(lifetime.kill_descendants)

    @web.middleware
    async def limit_body(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """A declared body above the limit is refused before a byte of it is read; an undeclared
        one (chunked) when reading passes the limit."""
        limit = MAX_FILE_BYTES if request.method == "PUT" else MAX_REQUEST_BYTES
        if request.content_length is not None and request.content_length > limit:
            return too_large(limit)
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return too_large(limit)

    async def health(self, request: web.Request) -> web.Response:
        body = Health(
            profile=self.profile,
            network_isolated=self.report.network_isolated,
            detail=self.report.detail,
            pid=os.getpid(),
            workspace=str(self.root),
            instance=self.instance,
        )
        return web.json_response(body.model_dump())

    async def claim(self, request: web.Request) -> web.Response:
        """A pool sandbox taken by a subagent: the one-time claim key (only the claiming harness
        holds it) sets the token every later request needs. The same claim again (an answer that
        was lost) is answered alike; any other is refused, so a sandbox is never claimed twice."""
        if self.claim_key_sha256 is None:
            body = ErrorBody(
                error="this sandbox has a token of its own; it is not claimed", rule=NOT_CLAIMABLE_RULE
            )
            return web.json_response(body.model_dump(), status=409)
        given = request.headers.get("Authorization", "")
        key = given.removeprefix("Bearer ") if given.startswith("Bearer ") else ""
        digest = hashlib.sha256(key.encode()).hexdigest()
        if not key or not hmac.compare_digest(digest, self.claim_key_sha256):
            return json_error(401, "missing or wrong claim key")
        try:
            claimed = ClaimRequest.model_validate(await request.json())
        except (json.JSONDecodeError, ValidationError) as error:
            return json_error(400, f"expected {{'token': ...}}: {error}")
        if self.token is None:
            self.token = claimed.token
        elif not hmac.compare_digest(self.token.encode(), claimed.token.encode()):
            return json_error(409, "this sandbox is claimed already")
        return await self.health(request)

    async def call_tool(self, request: web.Request) -> web.Response:
        name = request.match_info["tool"]
        if name not in self.tools:
            return json_error(404, f"unknown sandbox tool {name!r}; known: {sorted(self.tools)}")
        try:
            raw = await request.json()
        except json.JSONDecodeError as error:
            return json_error(400, f"request body is not JSON: {error}")
        model, run = self.tools[name]
        try:
            arguments = model.model_validate(raw)
        except ValidationError as error:
            # One line per problem, joined: pydantic's own text spans several lines.
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}"
                for problem in error.errors()
            )
            return self.tool_response(
                ToolResponse(ok=False, error=f"invalid arguments for {name}: {problems}")
            )
        try:
            output = await run(arguments)
        except workspace.TooLarge as error:
            # Refused for its size: the output says how large and what cap, so the harness can
            # stream the file to the artifact store instead.
            refusal = TooLargeOutput(path=error.name, size=error.size, cap=error.cap)
            return self.tool_response(ToolResponse(ok=False, output=refusal.model_dump(), error=str(error)))
        except TOOL_ERRORS as error:
            return self.tool_response(ToolResponse(ok=False, error=str(error)))
        except mcp_stdio.McpFailed as failed:
            return self.tool_response(ToolResponse(ok=False, output={"sent": failed.sent}, error=str(failed)))
        except WallReached as reached:
            return self.tool_response(
                ToolResponse(
                    ok=False,
                    output={**reached.output.model_dump(), "wall": reached.trip.wall},
                    error=str(reached),
                )
            )
        return self.tool_response(ToolResponse(ok=True, output=output.model_dump()))

    @staticmethod
    def tool_response(response: ToolResponse) -> web.Response:
        return web.json_response(response.model_dump())

    async def put_file(self, request: web.Request) -> web.Response:
        name = request.match_info["path"]
        expected = request.headers.get(SHA256_HEADER, "").lower()
        if not expected:
            return json_error(400, f"missing {SHA256_HEADER} header")
        mode: int | None = None
        if MODE_HEADER in request.headers:
            try:
                mode = int(request.headers[MODE_HEADER], 8) & 0o7777
            except ValueError:
                return json_error(400, f"{MODE_HEADER} must be an octal number")
        try:
            workspace.resolve_in_workspace(self.root, name)
        except UnsafePath as error:
            return json_error(400, str(error))
        declared = request.content_length
        if declared is not None and not await self.walls.admits(declared):
            return refused(workspace.refusal(name, "quota"))
        try:
            staged = await asyncio.to_thread(workspace.Staged, self.root, name, mode)
        except TOOL_ERRORS as error:
            return json_error(400, str(error))
        except OSError as error:
            return self.refused_for_space(name, error)
        committed = False
        try:
            hasher, size = hashlib.sha256(), 0
            async for chunk in request.content.iter_chunked(STAGE_CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    return too_large(MAX_FILE_BYTES)
                hasher.update(chunk)
                await asyncio.to_thread(staged.write, chunk)
            actual = hasher.hexdigest()
            if actual != expected:
                return json_error(
                    400, f"sha256 mismatch for {name!r}: header says {expected}, body is {actual}"
                )
            # An undeclared length is checked once written (the staged file already counts).
            if declared is None and not await self.walls.admits(0):
                return refused(workspace.refusal(name, "quota"))
            await asyncio.to_thread(staged.commit)
            committed = True
            entry = await asyncio.to_thread(workspace.describe, self.root, name)
        except workspace.WorkspaceRefusal as refusal:
            return refused(refusal)
        except TOOL_ERRORS as error:
            return json_error(400, str(error))
        except OSError as error:
            return self.refused_for_space(name, error)
        finally:
            if not committed:
                await asyncio.to_thread(staged.discard)
        return web.json_response(entry.model_dump(mode="json"))

    @staticmethod
    def refused_for_space(name: str, error: OSError) -> web.Response:
        quota = out_of_space(name, error)
        if quota is None:
            raise error
        return refused(quota)

    async def get_file(self, request: web.Request) -> web.StreamResponse:
        """The file streamed in pieces (hashed first, for the header), never held whole."""
        name = request.match_info["path"]
        try:
            handle, size, digest = await asyncio.to_thread(workspace.hashed_file, self.root, name)
        except workspace.WorkspaceRefusal as refusal:
            return refused(refusal)
        except UnsafePath as error:
            return json_error(400, str(error))
        except (FileNotFoundError, IsADirectoryError) as error:
            return json_error(404, str(error))
        with handle:
            response = web.StreamResponse(headers={SHA256_HEADER: digest})
            response.content_type = "application/octet-stream"
            response.content_length = size
            await response.prepare(request)
            remaining = size
            while remaining > 0:
                chunk = await asyncio.to_thread(handle.read, min(workspace.CHUNK_BYTES, remaining))
                if not chunk:
                    break  # cut short since it was hashed: the reader sees fewer bytes than declared
                await response.write(chunk)
                remaining -= len(chunk)
            await response.write_eof()
        return response

    async def manifest(self, request: web.Request) -> web.Response:
        try:
            body = ManifestRequest.model_validate(await request.json())
        except (json.JSONDecodeError, ValidationError) as error:
            return json_error(400, f"expected {{'paths': [...]}}: {error}")
        try:
            for name in body.paths:
                workspace.check_relative_name(name)
        except UnsafePath as error:
            return json_error(400, str(error))
        entries, missing = [], []
        total, limit = 0, self.walls.limits.disk_bytes
        for name in body.paths:
            try:
                entry = await asyncio.to_thread(workspace.describe, self.root, name)
            except workspace.WorkspaceRefusal as refusal:
                return refused(refusal)
            except FileNotFoundError:
                missing.append(name)
                continue
            entries.append(entry)
            total += entry.size
            if limit and total > limit:
                # Files that cannot all be put back in a sandbox of this disk figure (sparse ones
                # can hold far more than they take): a checkpoint of them could never be restored.
                return refused(workspace.refusal(name, "quota"))
        if missing:
            return json_error(404, f"declared files missing from the workspace: {missing}")
        return web.json_response([entry.model_dump(mode="json") for entry in entries])

    # -------------------------------------------------------------------------------------- tools

    def command_environment(self) -> dict[str, str]:
        environment = {k: v for k, v in os.environ.items() if k != isolation.HOST_NETNS_ENV}
        # `python` in a command means this runtime's interpreter, whatever the host's PATH says.
        interpreter_dir = str(Path(sys.executable).parent)
        environment["PATH"] = os.pathsep.join([interpreter_dir, environment.get("PATH", "/usr/bin:/bin")])
        environment["BELAY_WORKSPACE"] = str(self.root)
        return environment

    async def run_command(self, arguments: RunCommandArgs) -> RunCommandOutput:
        cwd = workspace.resolve_in_workspace(self.root, arguments.cwd) if arguments.cwd else self.root
        if not cwd.is_dir():
            raise NotADirectoryError(f"cwd {arguments.cwd!r} is not a directory in the workspace")
        command = arguments.command
        if command_size(command) > MAX_COMMAND_BYTES:
            raise CommandTooLong(
                f"the command is {command_size(command)} bytes, above the sandbox's limit of "
                f"{MAX_COMMAND_BYTES}: write it to a script with write_file and run the script"
            )
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise FileNotFoundError("empty command")
        before = self.walls.reading()
        try:
            process = await self.spawn(argv, cwd)
        except (FileNotFoundError, PermissionError) as error:
            return RunCommandOutput(exit_code=127, stdout="", stderr=str(error))
        except (BlockingIOError, RuntimeError) as error:
            if not self.walls.limits.processes:
                raise
            # No process (or no thread to wait for one) to be had: the sandbox is at its process
            # limit, held there by what earlier commands left running.
            self.stop_every_command()
            output = RunCommandOutput(exit_code=-1, stdout="", stderr=str(error))
            raise WallReached(limits.process_trip(self.walls.limits.processes), output) from None
        self.running_groups.add(process.pid)
        try:
            return await self.follow_command(process, arguments.timeout_s, before, arguments.max_output_bytes)
        finally:
            self.running_groups.discard(process.pid)
            self.reap()

    async def spawn(self, argv: list[str], cwd: Path) -> asyncio.subprocess.Process:
        self.spawning += 1
        try:
            return await asyncio.create_subprocess_exec(
                *self.report.command_prefix,
                *argv,
                cwd=cwd,
                env=self.command_environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # Its own process group, so a timeout (or the server stopping) kills all it started.
                start_new_session=True,
                preexec_fn=self.walls.preexec(),
            )
        finally:
            self.spawning -= 1

    async def follow_command(
        self, process: asyncio.subprocess.Process, requested_s: float, before: limits.Reading, cap: int
    ) -> RunCommandOutput:
        """Until the command ends, its timeout passes or it trips a wall; what it printed, and the
        trip (WallReached) when one stopped it."""
        stdout, stderr = CapturedOutput(cap), CapturedOutput(cap)
        readers = asyncio.gather(stdout.read_all(process.stdout), stderr.read_all(process.stderr))
        timeout_s, timeout_is_the_wall = self.walls.timeout(requested_s)
        exited = asyncio.ensure_future(wait_for_exit(process))
        watch = asyncio.ensure_future(self.walls.watch(before))
        try:
            await asyncio.wait({exited, watch}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        trip = watch.result() if watch.done() and not watch.cancelled() else None
        timed_out = not exited.done() and trip is None
        if not exited.done():
            self.kill_group(process.pid)
        await exited
        if trip is None and not timed_out:
            trip = await self.walls.after(before, failed=bool(process.returncode))
        if trip is not None and trip.wall == "processes":
            self.stop_every_command()
        if timed_out and timeout_is_the_wall:
            trip = limits.time_trip(int(timeout_s))
        notes = []
        output_cut = False
        try:
            await asyncio.wait_for(readers, DRAIN_AFTER_KILL_S)
        except TimeoutError:
            # A process it left running in the background still holds the pipes: keep what was read.
            output_cut = True
            notes.append("[belay] output cut: a background process still holds stdout/stderr")
        if (trip is None or trip.wall == "time") and (timed_out or process.returncode):
            # A refused fork or allocation is the wall the command ran into, even when it then sat
            # until its time ran out: bash retries a refused fork with growing sleeps, and as root
            # RLIMIT_NPROC counts every local sandbox's processes, so the server's own count of
            # this sandbox's tasks can stay below the figure while the kernel refuses.
            trip = self.walls.refused_by_rlimit(stderr.text()) or trip
            if trip is not None and trip.wall == "processes":
                self.stop_every_command()
        if trip is not None:
            notes.append(f"[belay] {trip.message}")
        elif timed_out:
            notes.append(f"[belay] command timed out after {timeout_s:g}s and was killed")
        for stream, captured in (("stdout", stdout), ("stderr", stderr)):
            if captured.truncated:
                notes.append(
                    f"[belay] {stream} cut at the command output cap of {cap} bytes: redirect it to a "
                    "file and read that in parts"
                )
        output = RunCommandOutput(
            exit_code=process.returncode if process.returncode is not None else -1,
            stdout=stdout.text(),
            stderr=stderr.text() + "".join(f"\n{note}\n" for note in notes),
            timed_out=timed_out,
            truncated=stdout.truncated or stderr.truncated or output_cut,
        )
        if trip is not None:
            raise WallReached(trip, output)
        return output

    async def mcp_list(self, arguments: mcp_stdio.McpListArgs) -> mcp_stdio.McpListOutput:
        argv = self.tool_server_argv(arguments.command)
        return await mcp_stdio.list_tools(arguments, argv, self.root, self.command_environment())

    async def mcp_call(self, arguments: mcp_stdio.McpCallArgs) -> mcp_stdio.McpCallOutput:
        argv = self.tool_server_argv(arguments.command)
        return await mcp_stdio.call_tool(arguments, argv, self.root, self.command_environment())

    def tool_server_argv(self, command: list[str]) -> list[str]:
        """A declared MCP server's command as it is started: in the sandbox, under a command's walls."""
        return [*self.report.command_prefix, *walled_exec.walled_argv(self.walls, command)]

    async def read_file(self, arguments: ReadFileArgs) -> ReadFileOutput:
        data = await asyncio.to_thread(workspace.read_bytes, self.root, arguments.path, arguments.max_bytes)
        try:
            return ReadFileOutput(content=data.decode())
        except UnicodeDecodeError as error:
            raise BinaryContent(
                f"{arguments.path!r} is not UTF-8 text ({error.reason} at byte {error.start})"
            ) from error

    async def write_file(self, arguments: WriteFileArgs) -> WriteFileOutput:
        data = arguments.content.encode()
        if not await self.walls.admits(len(data)):
            raise WorkspaceFull(self.walls.full(len(data)).message)
        try:
            await asyncio.to_thread(
                workspace.write_atomically, self.root, arguments.path, data, arguments.mode
            )
        except OSError as error:
            # The sandbox's disk is full (its size is the figure): the call's failure, never the server's.
            if out_of_space(arguments.path, error) is None:
                raise
            raise WorkspaceFull(self.walls.full(len(data)).message) from None
        return WriteFileOutput(sha256=workspace.sha256_bytes(data), size=len(data))

    async def list_files(self, arguments: ListFilesArgs) -> ListFilesOutput:
        return ListFilesOutput(files=await asyncio.to_thread(workspace.list_files, self.root, arguments.path))

    @staticmethod
    def kill_group(group: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)

    def kill_all_commands(self) -> None:
        for group in list(self.running_groups):
            self.kill_group(group)

    def stop_every_command(self) -> None:
        """Every process the sandbox's commands started, wherever it went: after a process-limit
        trip, whatever was left running would keep the sandbox at its limit."""
        self.kill_all_commands()
        lifetime.kill_descendants()
        self.reap()

    def reap(self) -> None:
        """Ended orphans (a command's background processes, adopted as subreaper) are reaped here;
        the commands' own processes are asyncio's to wait for."""
        if self.spawning == 0:
            lifetime.reap_adopted(self.running_groups)


def write_ready_file(path: Path, ready: ReadyFile) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(ready.model_dump_json())
    os.replace(temporary, path)


async def reap_every_second(server: SandboxServer) -> None:
    while True:
        await asyncio.sleep(1.0)
        server.reap()


async def serve(options: argparse.Namespace, report: isolation.IsolationReport) -> None:
    token = None
    if options.token_file is not None:
        token = options.token_file.read_text().strip()
        if not token:
            raise SystemExit(f"token file {options.token_file} is empty")
    root = options.workspace.resolve()
    root.mkdir(parents=True, exist_ok=True)
    walls = limits.Walls(limits.from_options(options), root)
    await asyncio.to_thread(walls.measure_disk)
    report = replace(report, detail=f"{report.detail}; {walls.describe()}")
    server = SandboxServer(
        root,
        token,
        options.network_profile,
        report,
        os.environ.get(INSTANCE_ENV),
        walls=walls,
        claim_key_sha256=options.claim_key_sha256,
    )
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site: web.BaseSite
    if options.socket is not None:
        options.socket.unlink(missing_ok=True)
        site = web.UnixSite(runner, str(options.socket))
        await site.start()
        os.chmod(options.socket, 0o600)
        endpoint = f"unix://{options.socket.resolve()}"
    elif options.socket_fd is not None:
        listener = socket.socket(fileno=options.socket_fd)
        site = web.SockSite(runner, listener)
        await site.start()
        endpoint = f"unix://{listener.getsockname()}"
    else:
        site = web.TCPSite(runner, options.host, options.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        endpoint = f"http://{host}:{port}"
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stopping.set)
    ready = ReadyFile(
        pid=os.getpid(), endpoint=endpoint, network_isolated=report.network_isolated, detail=report.detail
    )
    if options.ready_file is not None:
        write_ready_file(options.ready_file, ready)
    elif options.ready_fd is not None:
        with os.fdopen(options.ready_fd, "w") as pipe:
            pipe.write(ready.model_dump_json())
    reaper = asyncio.ensure_future(reap_every_second(server))
    try:
        await stopping.wait()
        await server.stop(options.drain_s)
    finally:
        reaper.cancel()
        server.kill_all_commands()
        await asyncio.to_thread(lifetime.kill_descendants)
        await runner.cleanup()
        if options.socket is not None:
            options.socket.unlink(missing_ok=True)
