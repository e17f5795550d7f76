"""Prometheus metrics of the operator. No label names a session: a fleet of thousands of sessions
must not become thousands of series."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter("belay_reconciles_total", "Reconcile passes of AgentSessions", ["result"])
RECONCILE_SECONDS = Histogram(
    "belay_reconcile_seconds",
    "Duration of one reconcile pass",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SESSIONS = Gauge("belay_sessions", "AgentSessions this operator reconciles")
HARNESS_REPLACEMENTS = Counter("belay_harness_replacements_total", "Harness attempts started after a loss")


def serve(port: int) -> None:
    start_http_server(port)
