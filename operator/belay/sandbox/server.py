"""The sandbox server: runs tools in one workspace, behind a bearer token.

    python -m belay.sandbox.server --workspace DIR (--socket PATH | --port N) --token-file FILE \
        --network-profile none|allowlist|internet [--ready-file FILE]

The same code serves a sandbox pod (TCP) and a local sandbox process (a Unix socket). Endpoints:

    GET  /healthz                 profile and whether network isolation is really in force
    POST /v1/tools/{tool}         run_command, read_file, write_file, list_files
    PUT  /v1/files/{path}         raw bytes, verified against X-Content-Sha256, written atomically
    GET  /v1/files/{path}         raw bytes
    POST /v1/manifest             {"paths": [...]} -> [{name, sha256, size, mode}]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

# Only light imports here: with profile `none` this module runs twice (before and after entering
# the new network namespace), and aiohttp and pydantic are imported once, after the re-exec.
from belay.sandbox import isolation


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m belay.sandbox.server", description=__doc__)
    parser.add_argument("--workspace", required=True, type=Path)
    listen = parser.add_mutually_exclusive_group(required=True)
    listen.add_argument("--socket", type=Path, help="listen on this Unix socket")
    listen.add_argument("--port", type=int, help="listen on TCP (0 picks a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="TCP address (a pod passes 0.0.0.0)")
    parser.add_argument("--token-file", required=True, type=Path)
    parser.add_argument("--network-profile", required=True, choices=isolation.NETWORK_PROFILES)
    parser.add_argument("--ready-file", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    options = parse_arguments(arguments)
    host_netns = os.environ.get(isolation.HOST_NETNS_ENV)
    if host_netns is not None:
        # We are the re-executed server inside the new namespace.
        with contextlib.suppress(OSError):
            isolation.bring_loopback_up()
        report = isolation.observe_own_isolation(host_netns)
    else:
        report, reexec_with = isolation.plan_isolation(options.network_profile, options.socket is None)
        if reexec_with is not None:
            os.environ[isolation.HOST_NETNS_ENV] = isolation.current_netns()
            os.execv(reexec_with[0], isolation.reexec_argv(reexec_with, sys.executable, arguments))
    from belay.sandbox.app import serve

    asyncio.run(serve(options, report))


if __name__ == "__main__":
    main()
