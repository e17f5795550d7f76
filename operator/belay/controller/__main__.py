"""`python -m belay.controller`: the operator process (what the chart's Deployment runs).

kopf with its liveness endpoint, the Prometheus metrics endpoint, and peering so that of two
replicas only one acts at a time (the other waits while the first holds the higher priority)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import kopf

from belay.controller import handlers, metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m belay.controller")
    parser.add_argument("--namespace", action="append", default=[], help="watch only these (default: all)")
    parser.add_argument("--metrics-port", type=int, default=8080)
    parser.add_argument("--health-port", type=int, default=8081)
    parser.add_argument("--peering", default=None, help="KopfPeering name; omit to run standalone")
    parser.add_argument("--priority", type=int, default=0)
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handler call is noise
    metrics.serve(args.metrics_port)
    assert handlers.session_worker is not None  # importing registers the handlers
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz",
            standalone=args.peering is None,
            peering_name=args.peering,
            priority=args.priority,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
