"""Prometheus metrics of the operator. No label names a session: a fleet of thousands of sessions
must not become thousands of series. The dashboard in `charts/belay/dashboards/` draws these."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from belay.journal.phase import Phase
from belay.views.fleet.build import fleet_row
from belay.views.status.model import SessionStatus

RECONCILES = Counter("belay_reconciles_total", "Reconcile passes of AgentSessions", ["result"])
RECONCILE_SECONDS = Histogram(
    "belay_reconcile_seconds",
    "Duration of one reconcile pass",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SESSIONS = Gauge("belay_sessions", "AgentSessions this operator reconciles")
HARNESS_REPLACEMENTS = Counter("belay_harness_replacements_total", "Harness attempts started after a loss")
SESSIONS_BY_PHASE = Gauge("belay_sessions_by_phase", "AgentSessions by the phase of their status", ["phase"])
WAITS = Gauge(
    "belay_waits",
    "What the AgentSessions wait on, by who acts: user (approvals, reconciliations, questions), "
    "external (conditions), review (deliverables ready for review)",
    ["kind"],
)
WAIT_KINDS = ("user", "external", "review")

# By session key, the phase and the waits of its last status: the gauges are their sums.
_observed: dict[str, tuple[str, dict[str, int]]] = {}


def observe_session(key: str, status: SessionStatus) -> None:
    """Count the session by the status a pass just wrote."""
    row = fleet_row(key, status, now=datetime.now(UTC))
    waits = {
        "user": len(row.waits_on_user),
        "external": len(row.waits_on_external),
        "review": len(row.ready_for_review),
    }
    _observed[key] = (row.phase, waits)
    _publish()


def forget_session(key: str) -> None:
    _observed.pop(key, None)
    _publish()


def _publish() -> None:
    phases = [p.value for p in Phase] + sorted({p for p, _ in _observed.values()} - {p.value for p in Phase})
    for phase in phases:
        SESSIONS_BY_PHASE.labels(phase=phase).set(sum(1 for p, _ in _observed.values() if p == phase))
    for kind in WAIT_KINDS:
        WAITS.labels(kind=kind).set(sum(w[kind] for _, w in _observed.values()))


def serve(port: int) -> None:
    start_http_server(port)
