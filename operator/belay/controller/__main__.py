"""`python -m belay.controller`: the operator process (what the chart's Deployment runs).

kopf with its liveness endpoint and the Prometheus metrics endpoint. With `--leader-elect`, a
replica acts only while it holds the Lease (see `belay.controller.leader`); the others wait as
candidates, so two replicas never both act. A candidate answers the liveness probe itself: kopf,
which serves `/healthz` for the leader, starts only with the Lease, and a kubelet would otherwise
restart every waiting replica."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys

import kopf
from aiohttp import web

from belay.controller import handlers, metrics
from belay.controller.kube import load_api_client
from belay.controller.leader import LeaderElector, LeadershipLost


async def _serve_candidate_liveness(port: int) -> web.AppRunner:
    async def alive(_: web.Request) -> web.Response:
        return web.json_response({"candidate": True})

    app = web.Application()
    app.router.add_get("/healthz", alive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def run(args: argparse.Namespace) -> int:
    operator = kopf.operator(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz",
        standalone=True,
    )
    if not args.leader_elect:
        await operator
        return 0
    identity = os.environ.get("POD_NAME") or socket.gethostname()
    elector = LeaderElector(
        load_api_client(os.environ.get(handlers.KUBECONFIG_ENV)),
        args.lease_namespace or os.environ.get("POD_NAMESPACE", "default"),
        args.lease_name,
        identity,
    )
    waiting = await _serve_candidate_liveness(args.health_port)
    try:
        await elector.acquire()
    finally:
        await waiting.cleanup()  # the port is kopf's from here on
    acting = asyncio.ensure_future(operator)
    holding = asyncio.ensure_future(elector.hold())
    done, _ = await asyncio.wait({acting, holding}, return_when=asyncio.FIRST_COMPLETED)
    if holding in done:
        acting.cancel()
        try:
            holding.result()
        except LeadershipLost as lost:
            logging.getLogger("belay.leader").error("%s; stopping", lost)
            return 1
    holding.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m belay.controller")
    parser.add_argument("--namespace", action="append", default=[], help="watch only these (default: all)")
    parser.add_argument("--metrics-port", type=int, default=8080)
    parser.add_argument("--health-port", type=int, default=8081)
    parser.add_argument("--leader-elect", action="store_true", help="act only while holding the Lease")
    parser.add_argument("--lease-name", default="belay-operator")
    parser.add_argument("--lease-namespace", default=None, help="default: $POD_NAMESPACE")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handler call is noise
    metrics.serve(args.metrics_port)
    assert handlers.session_worker is not None  # importing registers the handlers
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
