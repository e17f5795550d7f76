"""An objective in the test cluster: the coordinator of examples/release-notes starts two child
sessions for its parts; the operator creates their AgentSessions (labelled with the objective,
their parent and their part), records each link in both records, and when a child ends brings its
deliverable back as an artifact of the coordinator, which then completes. A person with
AgentSession access only sees the whole with `kubectl belay objective` and fetches each child's
deliverable from the coordinator; an amend of a child reopens it in the coordinator, which collects
its next end."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from belay.controller.kube import load_api_client
from belay.controller.names import record_id
from belay.controller.settings import OperatorSettings
from belay.journal.events import Rejection, SessionLink
from belay.journal.state import SessionState, fold
from belay.stores.factory import open_artifact_store, open_event_store
from belay.views.fleet.model import OBJECTIVE_LABEL, PARENT_LABEL, PART_LABEL
from tests.api.kubehelpers import REPO_ROOT, install_crds
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import (
    OperatorProcess,
    agentsession_status,
    kubectl_json,
    wait_for,
    wait_for_session_end,
)
from tests.controller.sessions_only_user import kubectl_belay, s3_credentials, sessions_only_kubeconfig
from tests.testenv.kube import ControlPlane
from tests.testenv.s3 import S3Server

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-objective"
EXAMPLE = REPO_ROOT / "examples/release-notes"
COORDINATOR = "release-notes"
CHILDREN = {"notes-parser": ("parser", "parser.md"), "notes-docs": ("docs", "docs.md")}
BUCKET = "belay-objective"


async def a_rejection_of_collected_bytes_is_reported_not_recorded(
    kube: ControlPlane, events_url: str, describe: Callable[[], str]
) -> None:
    """A `spec.rejections` entry for bytes the coordinator collected is not recorded (the operator
    does not reopen children yet) and not dropped silently: a Warning event says so."""
    child, (_, deliverable) = next(iter(CHILDREN.items()))
    name = f"{child}/{deliverable}"
    store = open_event_store(events_url)
    try:
        before = await store.read(record_id(NAMESPACE, COORDINATOR))
        sha256 = fold(before).artifacts[name].ref.sha256
        entry = {"item": name, "sha256": sha256, "reason": "name the versions", "by": "alice"}
        patch = {"spec": {"rejections": [entry]}}
        kube.kubectl(
            "patch", "agentsession", COORDINATOR, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch)
        )

        def warned() -> str | None:
            listed = kubectl_json(
                kube,
                "get",
                "events",
                "-n",
                NAMESPACE,
                "--field-selector",
                f"involvedObject.name={COORDINATOR}",
            )
            reasons = [e for e in listed.get("items", []) if e.get("reason") == "RejectionNotApplied"]
            return reasons[0]["message"] if reasons else None

        message = wait_for(
            warned, "the warning that the rejection is not applied", timeout=60, describe=describe
        )
        assert name in message and "does not do yet" in message, message
        after = await store.read(record_id(NAMESPACE, COORDINATOR))
        assert not [e for e in after[len(before) :] if isinstance(e.payload, Rejection)]
    finally:
        await store.close()


async def an_amended_child_is_collected_again(
    kube: ControlPlane, config_file: Path, events_url: str, describe: Callable[[], str]
) -> None:
    """`kubectl belay amend` of a child whose end the coordinator collected: the operator records
    the child reopened in the coordinator's record (once), the child runs its next round, and the
    coordinator collects its new end, the bytes the child holds now."""
    child, (_, deliverable) = next(iter(CHILDREN.items()))
    amended = kubectl_belay(
        config_file, "amend", child, "--goal", "Write the parser notes, naming each version."
    )
    assert amended.returncode == 0, amended.stderr
    parent_record = record_id(NAMESPACE, COORDINATOR)
    store = open_event_store(events_url)
    try:

        async def states() -> tuple[SessionState, SessionState]:
            return fold(await store.read(record_id(NAMESPACE, child))), fold(await store.read(parent_record))

        async def until(
            reached: Callable[[SessionState, SessionState], bool], what: str, seconds: float
        ) -> None:
            deadline = time.monotonic() + seconds  # only turns a hang into a failure
            while not reached(*await states()):
                assert time.monotonic() < deadline, (
                    f"{what}: {(await states())[1].children[child]}\n{describe()}"
                )
                await asyncio.sleep(0.5)

        await until(
            lambda own, _: own.request.version == 2 and own.lifecycle.completed, "the child's next round", 600
        )
        # The coordinator's passes follow the child's record at once.
        await until(
            lambda _, parent: parent.children[child].round == 2 and bool(parent.children[child].phase),
            "the coordinator to collect the child's next end",
            60,
        )
        own, parent = await states()
        link = parent.children[child]
        assert (link.phase, dict(link.deliverables)) == (
            "Succeeded",
            {deliverable: own.artifacts[deliverable].ref.sha256},
        )
        assert parent.artifacts[f"{child}/{deliverable}"].ref == own.artifacts[deliverable].ref
        reopened = [
            e
            for e in await store.read(parent_record)
            if isinstance(e.payload, SessionLink) and e.payload.reopened
        ]
        assert len(reopened) == 1 and reopened[0].payload.session == child
    finally:
        await store.close()
    # Both statuses say so again: the child ended its next round, the coordinator holds its bytes.
    for name in (child, COORDINATOR):
        wait_for(
            lambda name=name: agentsession_status(kube, NAMESPACE, name).get("phase") == "Succeeded",
            f"{name} to show Succeeded again",
            timeout=120,
            describe=describe,
        )


def coordinator_manifest() -> dict[str, object]:
    """The example, with its plan where the local pods read it."""
    manifest = copy.deepcopy(yaml.safe_load((EXAMPLE / "session.yaml").read_text()))
    manifest["metadata"]["namespace"] = NAMESPACE
    manifest["spec"]["executor"]["plan"] = str(EXAMPLE / "coordinator-plan.yaml")
    return manifest


async def test_a_coordinator_and_two_child_sessions_complete_one_objective(
    kube: ControlPlane, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_crds(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    config_file = sessions_only_kubeconfig(kube, NAMESPACE, tmp_path / "sessions-only.kubeconfig")
    s3_server.client().create_bucket(Bucket=BUCKET)
    credentials = s3_credentials(s3_server)
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    events_url, artifacts_url = f"sqlite://{tmp_path / 'events.db'}", f"s3://{BUCKET}/objective"
    settings = OperatorSettings(
        event_store=events_url, artifact_store=artifacts_url, image_pull_policy="Never"
    )
    operator = OperatorProcess(kube, NAMESPACE, settings, tmp_path / "operator.log").start()
    describe = lambda: f"operator log:\n{operator.log()[-6000:]}"  # noqa: E731
    api = load_api_client(str(kube.kubeconfig))
    try:
        harness_env = lambda pod: credentials if "-harness-" in pod["metadata"]["name"] else {}  # noqa: E731
        with LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env):
            kube.kubectl("create", "-f", "-", input=json.dumps(coordinator_manifest()))
            done = wait_for_session_end(kube, NAMESPACE, COORDINATOR, timeout=900, describe=describe)
            assert done["phase"] == "Succeeded", done
            for child in CHILDREN:
                ended = wait_for_session_end(kube, NAMESPACE, child, timeout=60, describe=describe)
                assert ended["phase"] == "Succeeded", ended
            await a_rejection_of_collected_bytes_is_reported_not_recorded(kube, events_url, describe)
            await an_amended_child_is_collected_again(kube, config_file, events_url, describe)
    finally:
        operator.stop()

    # The children's AgentSessions: labelled with the objective, their parent and their part.
    for child, (part, _) in CHILDREN.items():
        labels = kubectl_json(kube, "get", "agentsession", child, "-n", NAMESPACE)["metadata"]["labels"]
        assert labels[OBJECTIVE_LABEL] == "release-notes"
        assert (labels[PARENT_LABEL], labels[PART_LABEL]) == (COORDINATOR, part)

    # Both records hold the link; each child's deliverable is an artifact of the coordinator.
    store = open_event_store(events_url)
    artifacts = open_artifact_store(artifacts_url)
    try:
        parent = fold(await store.read(record_id(NAMESPACE, COORDINATOR)))
        for child, (part, deliverable) in CHILDREN.items():
            link = parent.children[child]
            assert (link.part, link.phase) == (part, "Succeeded")
            own = fold(await store.read(record_id(NAMESPACE, child)))
            assert own.parent is not None and (own.parent.session, own.parent.part) == (COORDINATOR, part)
            assert own.parent.objective == "release-notes"
            # What the child's harness told a person to run is spelled for kubectl, in a cluster.
            review = own.waits[f"review-{deliverable}"].reason
            assert review.endswith(f": kubectl belay artifacts get {child} {deliverable} -o {deliverable}")
            flowed = parent.artifacts[f"{child}/{deliverable}"]
            assert flowed.deliverable and flowed.ref.sha256 == own.artifacts[deliverable].ref.sha256
            assert dict(link.deliverables) == {deliverable: flowed.ref.sha256}
        assert not parent.open_waits
    finally:
        await store.close()

    # The objective as a person with AgentSession access sees it, and each child's deliverable
    # fetched from the coordinator.
    shown = kubectl_belay(config_file, "objective", "release-notes", "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    # Done, and what is left is your review of what the coordinator collected, fetched from it.
    assert view["done"] is True
    assert sorted((w["session"], w["kind"], w["what"]) for w in view["waits_on"]) == sorted(
        (COORDINATOR, "review", f"{c}/{d}") for c, (_, d) in CHILDREN.items()
    )
    for wait in view["waits_on"]:
        fetch = f"kubectl belay artifacts get {COORDINATOR} {wait['what']} -o "
        assert wait["command"].startswith(fetch), wait
    rows = {row["session"]: row for row in view["sessions"]}
    assert sorted(rows) == sorted([COORDINATOR, *CHILDREN])
    assert sorted(rows[COORDINATOR]["children"]) == sorted(CHILDREN)
    assert sorted(rows[COORDINATOR]["deliverables"]) == sorted(f"{c}/{d}" for c, (_, d) in CHILDREN.items())
    for child, (part, deliverable) in CHILDREN.items():
        assert (rows[child]["parent"], rows[child]["part"]) == (COORDINATOR, part)
        target = tmp_path / deliverable
        fetched = kubectl_belay(
            config_file, "artifacts", "get", COORDINATOR, f"{child}/{deliverable}", "-o", str(target)
        )
        assert fetched.returncode == 0, fetched.stderr
        assert target.read_bytes() == artifacts.get(parent.artifacts[f"{child}/{deliverable}"].ref.sha256)
    text = kubectl_belay(config_file, "objective", "release-notes")
    assert text.returncode == 0, text.stderr
    print(text.stdout)  # shown with -s; docs/cli.md quotes it
    assert text.stdout.splitlines()[0].startswith("Objective release-notes: 3 sessions: ")
    assert "Every session succeeded; what is left is yours to review:" in text.stdout
    # The coordinator's own page, built from its status, lists what it collected and where it is.
    page = kubectl_belay(config_file, "brief", COORDINATOR)
    assert page.returncode == 0, page.stderr
    ready = page.stdout[page.stdout.index("Ready for review\n") : page.stdout.index("Hypotheses")]
    for child, (_, deliverable) in CHILDREN.items():
        collected = f"{child}/{deliverable}"
        fetch = f"download: kubectl belay artifacts get {COORDINATOR} {collected} -o {collected}"
        assert fetch in ready, ready
