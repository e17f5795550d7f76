"""The Grafana dashboard in the chart: shipped as a ConfigMap for Grafana's dashboard sidecar when
asked for, drawing exactly the metrics the operator exports (none missing, none made up), and the
gauges it draws (sessions by phase, waits by kind) counting what the operator's statuses say."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import prometheus_client

from belay.controller import metrics
from belay.views.status.model import SessionStatus
from tests.api.kubehelpers import REPO_ROOT
from tests.controller.test_chart import render

DASHBOARD = REPO_ROOT / "charts/belay/dashboards/belay-operator.json"


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def operator_metric_names() -> set[str]:
    """The families of the operator's metrics module, as Prometheus names them."""
    names = set()
    for value in vars(metrics).values():
        if isinstance(value, prometheus_client.metrics.MetricWrapperBase):
            for family in value.describe():
                names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_the_dashboard_draws_every_operator_metric_and_no_other() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for expr in expressions(dashboard)
        for name in re.findall(r"\bbelay_[a-z_]+", expr)
    }
    assert queried == operator_metric_names()
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {"Sessions by phase", "Waits by kind", "Recoveries", "Reconcile latency"} <= titles
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in dashboard["panels"])


def test_the_chart_ships_the_dashboard_for_the_grafana_sidecar_when_asked(helm_bin: Path) -> None:
    assert not [o for o in render(helm_bin) if o["kind"] == "ConfigMap"]
    objects = render(helm_bin, "--set", "metrics.grafanaDashboard.enabled=true")
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["belay-operator.json"]) == json.loads(DASHBOARD.read_text())


def sample(name: str, **labels: str) -> float | None:
    return prometheus_client.REGISTRY.get_sample_value(name, labels)


def typed(status: dict[str, Any]) -> SessionStatus:
    """A status as a pass writes it, from the fields this test sets."""
    return SessionStatus.model_validate({"conditions": [], "counts": {}, **status})


def item(kind: str, item_id: str, state: str) -> dict[str, str]:
    """An open item as the status classifies it (belay.views.briefing.classify): what the gauges count."""
    return {"kind": kind, "id": item_id, "state": state}


def approval(approval_id: str) -> dict[str, str]:
    return {
        "approvalId": approval_id,
        "operationId": approval_id.removeprefix("approve-"),
        "tool": "create_ticket",
        "payloadSha256": "0" * 64,
        "command": f"kubectl belay approve s {approval_id}",
    }


def test_sessions_by_phase_and_waits_by_kind_follow_the_statuses() -> None:
    waiting = {
        "phase": "WaitingOnUser",
        "pendingApprovals": [approval("approve-a.1"), approval("approve-a.2")],
        "unknownOutcomes": ["a.3"],
        "waits": [
            {"waitId": "reconcile-a.3", "kind": "on_user", "reason": "did it?", "condition": "a.3"},
            {"waitId": "question-1", "kind": "on_user", "reason": "which?"},
            {"waitId": "wait-ci", "kind": "on_external", "reason": "CI", "condition": "ci-green"},
        ],
        "items": [
            item("approval", "approve-a.1", "waiting_on_you"),
            item("approval", "approve-a.2", "waiting_on_you"),
            item("operation", "a.3", "waiting_on_you"),
            item("wait", "question-1", "waiting_on_you"),
            item("wait", "wait-ci", "waiting_on_external"),
            item("step", "a/work", "running"),
        ],
    }
    review = {
        "phase": "ReadyForReview",
        "waits": [{"waitId": "r", "kind": "ready_for_review", "reason": "read it", "artifact": "x.md"}],
        "items": [item("deliverable", "x.md", "ready_for_review"), item("step", "a/done", "done")],
    }
    metrics.observe_session("test/one", typed(waiting))
    metrics.observe_session("test/two", typed(review))
    metrics.observe_session(
        "test/three",
        typed(
            {
                "phase": "WaitingOnUser",
                "pendingApprovals": [approval("b")],
                "items": [item("approval", "b", "waiting_on_you")],
            }
        ),
    )
    try:
        assert sample("belay_sessions_by_phase", phase="WaitingOnUser") == 2
        assert sample("belay_sessions_by_phase", phase="ReadyForReview") == 1
        assert sample("belay_sessions_by_phase", phase="Running") == 0
        # Two approvals, the unknown outcome (its reconcile wait is the same item), a question,
        # and the third session's approval.
        assert sample("belay_waits", kind="user") == 5
        assert sample("belay_waits", kind="external") == 1
        assert sample("belay_waits", kind="review") == 1
        metrics.observe_session("test/three", typed({"phase": "Running"}))  # approved: it moved on
        assert sample("belay_sessions_by_phase", phase="WaitingOnUser") == 1
        assert sample("belay_sessions_by_phase", phase="Running") == 1
        assert sample("belay_waits", kind="user") == 4
    finally:
        for key in ("test/one", "test/two", "test/three"):
            metrics.forget_session(key)
    assert sample("belay_sessions_by_phase", phase="WaitingOnUser") == 0
    assert sample("belay_waits", kind="user") == 0
