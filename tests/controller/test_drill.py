"""The cluster drill's pure functions: the request read from the annotation (a malformed one is
ignored), the copy's fault point for each attempt, and the verdict from the copy's record."""

from __future__ import annotations

import json

from belay.controller.drill import (
    DrillRequest,
    drill_manifest,
    drill_name,
    drill_request,
    drill_status,
    fault_point,
)
from belay.journal.events import (
    Artifact,
    ArtifactRef,
    Event,
    Lifecycle,
    LifecycleKind,
    Payload,
    Task,
    TaskStatus,
    UserInput,
)
from belay.journal.state import fold
from tests.journal.fixtures import LogBuilder, sha

REPORT = ArtifactRef(sha256=sha("report"), size=6, media_type="text/markdown")
OTHER = ArtifactRef(sha256=sha("other"), size=5, media_type="text/markdown")
REQUEST = DrillRequest(nonce="ab12cd34", points=("checkpoint:worker/a", "checkpoint:worker/b"))


def log(*payloads: Payload) -> list[Event]:
    builder = LogBuilder("s-drill-ab12cd34")
    for payload in payloads:
        builder.add(payload)
    return builder.events


def run(report: ArtifactRef, *, steps: int = 1) -> list[Event]:
    payloads: list[Payload] = [UserInput(goal="g")]
    payloads += [Task(task_id="worker/a", status=TaskStatus.DONE, owner="worker") for _ in range(steps)]
    payloads += [
        Artifact(name="report.md", ref=report, deliverable=True),
        Lifecycle(kind=LifecycleKind.SESSION_COMPLETED),
    ]
    return log(*payloads)


def test_the_request_comes_from_the_annotation_and_a_malformed_one_is_ignored() -> None:
    value = json.dumps({"nonce": "ab12cd34", "points": ["checkpoint:worker/a"]})
    assert drill_request({"belay.dev/drill-request": value}) == DrillRequest(
        nonce="ab12cd34", points=("checkpoint:worker/a",)
    )
    for bad in (
        "not json",
        json.dumps({"nonce": "AB", "points": ["x:y"]}),
        json.dumps({"nonce": "ab12", "points": []}),
    ):
        assert drill_request({"belay.dev/drill-request": bad}) is None
    assert drill_request(None) is None


def test_the_copy_is_named_labelled_and_carries_its_points() -> None:
    source = {
        "metadata": {"name": "x" * 63, "namespace": "team-a", "uid": "u"},
        "spec": {"request": {"goal": "g"}, "approvals": [{"approvalId": "a"}], "rejections": [{"item": "r"}]},
    }
    copy = drill_manifest(source, REQUEST)
    assert (
        copy["metadata"]["name"] == drill_name("x" * 63, "ab12cd34") and len(copy["metadata"]["name"]) == 63
    )
    assert copy["metadata"]["labels"] == {"belay.dev/drill-of": "x" * 63}
    assert copy["metadata"]["annotations"] == {
        "belay.dev/fault-points": "checkpoint:worker/a,checkpoint:worker/b"
    }
    assert copy["spec"]["approvals"] == [{"approvalId": "a"}] and "rejections" not in copy["spec"]


def test_each_attempt_of_the_copy_stops_at_its_own_point_then_none() -> None:
    annotations = {"belay.dev/fault-points": "checkpoint:worker/a,checkpoint:worker/b"}
    lost = [Lifecycle(kind=LifecycleKind.HARNESS_LOST, attempt=n) for n in (1, 2)]
    assert fault_point(annotations, fold(log(UserInput(goal="g")))) == "checkpoint:worker/a"
    assert fault_point(annotations, fold(log(UserInput(goal="g"), lost[0]))) == "checkpoint:worker/b"
    assert fault_point(annotations, fold(log(UserInput(goal="g"), *lost))) is None
    assert fault_point({}, fold(log(UserInput(goal="g")))) is None  # not a drill copy


def test_the_verdict_needs_completion_nothing_repeated_and_the_same_bytes() -> None:
    source = fold(run(REPORT))
    running = fold(log(UserInput(goal="g")))
    assert drill_status(REQUEST, "c", running, None, source).passed is None
    good = run(REPORT)
    assert drill_status(REQUEST, "c", fold(good), good, source).passed is True
    other = run(OTHER)
    verdict = drill_status(REQUEST, "c", fold(other), other, source)
    assert verdict.passed is False
    assert [(d.name, d.sha256, d.source_sha256) for d in verdict.deliverables] == [
        ("report.md", OTHER.sha256, REPORT.sha256)
    ]
    twice = run(REPORT, steps=2)
    repeated = drill_status(REQUEST, "c", fold(twice), twice, source)
    assert repeated.passed is False and repeated.steps_run_twice == ["step worker/a completed 2 times"]
