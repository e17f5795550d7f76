"""The sandbox server: runs tools in one workspace, behind a bearer token.

    python -m belay.sandbox.server --workspace DIR (--socket PATH | --socket-fd FD | --port N) \
        (--token-file FILE | --claim-key-sha256 HEX) \
        --network-profile none|allowlist|internet [--ready-file FILE | --ready-fd FD] \
        [--drain-s SECONDS] \
        [--max-processes N] [--max-memory-mib N] [--max-disk-mib N] [--max-command-s N] \
        [--rlimits] [--cgroup DIR]... [--disk-path DIR]...

With `--claim-key-sha256` instead of a token file the server is a pool sandbox: it takes no request
until `POST /v1/claim` brings the key with that sha256 and the token it requires from then on
(docs/operator.md#the-sandbox-pool).

The `--max-*` figures are the sandbox's resource walls (belay.sandbox.limits): a command that runs
into one is stopped and its call fails, naming the wall and its figure.

On SIGTERM (or SIGINT) it refuses new requests, lets the running ones finish for up to
`--drain-s` seconds (default 0), kills every process its commands started and exits.

The same code serves a sandbox pod (TCP) and a local sandbox (a Unix socket); a local sandbox's
server runs inside its walls (`belay.sandbox.walls`), which it observes and reports. Endpoints:

    GET  /healthz                 profile, and which network isolation and walls are really in force
    POST /v1/claim                {"token": ...} with the claim key as the bearer (a pool sandbox only)
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
from belay import lifetime
from belay.sandbox import isolation, limits, walls


def _sha256_hex(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise argparse.ArgumentTypeError("a sha256 as 64 lowercase hex digits")
    return value


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m belay.sandbox.server", description=__doc__)
    parser.add_argument("--workspace", required=True, type=Path)
    listen = parser.add_mutually_exclusive_group(required=True)
    listen.add_argument("--socket", type=Path, help="listen on this Unix socket")
    listen.add_argument(
        "--socket-fd", type=int, help="serve on this inherited, listening Unix socket (made outside)"
    )
    listen.add_argument("--port", type=int, help="listen on TCP (0 picks a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="TCP address (a pod passes 0.0.0.0)")
    credential = parser.add_mutually_exclusive_group(required=True)
    credential.add_argument("--token-file", type=Path)
    credential.add_argument(
        "--claim-key-sha256",
        type=_sha256_hex,
        help="a pool sandbox: no token until a claim with the key of this sha256 gives it one",
    )
    parser.add_argument("--network-profile", required=True, choices=isolation.NETWORK_PROFILES)
    ready = parser.add_mutually_exclusive_group()
    ready.add_argument("--ready-file", type=Path)
    ready.add_argument("--ready-fd", type=int, help="write the ready report to this inherited pipe")
    parser.add_argument(
        "--drain-s",
        type=float,
        default=0.0,
        help="on SIGTERM, how long running requests may go on before every process is killed",
    )
    limits.add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    options = parse_arguments(arguments)
    # A sandbox is a machine of its own: what its commands create has the usual modes, whatever
    # the umask of the harness that started it (`belay` keeps 077 for its home). The workspace is
    # still private: its directory is its owner's alone, inside the home (docs/security.md).
    os.umask(0o022)
    # Every process a command starts stays a descendant of the server, however it detaches, so
    # the server takes them all with it when it stops.
    lifetime.become_subreaper()
    started_from = os.environ.pop(walls.HOST_NAMESPACES_ENV, None)
    if started_from is not None:
        # Inside the walls of a local sandbox (see belay.sandbox.walls): bwrap made the namespaces.
        walls.make_undumpable()
        egress_socket = os.environ.pop(walls.EGRESS_SOCKET_ENV, None)
        egress_rules = os.environ.pop(walls.EGRESS_RULES_ENV, "")
        report = isolation.walled_report(
            options.network_profile, walls.parse_host_namespaces(started_from), egress_socket, egress_rules
        )
        asyncio.run(serve_walled(options, report, egress_socket))
        return
    host_netns = os.environ.get(isolation.HOST_NETNS_ENV)
    if host_netns is not None:
        # We are the re-executed server inside the new namespace.
        with contextlib.suppress(OSError):
            isolation.bring_loopback_up()
        report = isolation.observe_own_isolation(host_netns)
    else:
        report, reexec_with = isolation.plan_isolation(options.network_profile, options.port is not None)
        if reexec_with is not None:
            os.environ[isolation.HOST_NETNS_ENV] = isolation.current_netns()
            os.execv(reexec_with[0], isolation.reexec_argv(reexec_with, sys.executable, arguments))
    from belay.sandbox.app import serve

    report = isolation.without_walls(
        report, listens_on_tcp=options.port is not None, token_file=options.token_file
    )
    asyncio.run(serve(options, report))


async def serve_walled(
    options: argparse.Namespace, report: isolation.IsolationReport, egress_socket: str | None
) -> None:
    from belay.sandbox.app import serve

    forwarder = None
    if egress_socket is not None:
        from belay.sandbox.egress import forward_to_proxy

        # Listening before the server writes its ready file: a ready sandbox can reach the proxy.
        forwarder = await forward_to_proxy(walls.PROXY_PORT, egress_socket)
    try:
        await serve(options, report)
    finally:
        if forwarder is not None:
            forwarder.close()


if __name__ == "__main__":
    main()
