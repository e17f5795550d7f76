"""The sandbox pool in a cluster (docs/operator.md#the-sandbox-pool), with the operator running and
the kubelet stand-in running its pods: the pool is kept at its size, a pool pod that dies is
replaced, a recovering attempt claims pool pods (never shared, never returned), puts them under
its session's NetworkPolicies, gives each its subagent's token, restores the declared state into
them and completes the session."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from belay.controller import names
from belay.controller.desired import SessionRef
from belay.controller.kube import KubeClient, load_api_client
from belay.controller.pool import SandboxTemplate, claim_patch, template_id
from belay.controller.pooling import SandboxPool
from belay.controller.settings import OperatorSettings
from belay.journal.events import LifecycleEvent, LifecycleKind
from belay.journal.state import fold
from belay.stores.factory import open_event_store
from tests.api.kubehelpers import REPO_ROOT
from tests.belay_cli import steps_run_twice
from tests.controller.kubelet import LocalKubelet
from tests.controller.operator_process import (
    OperatorProcess,
    agentsession_status,
    kubectl_json,
    wait_for,
    wait_for_session_end,
)
from tests.controller.sessions import pending_session
from tests.controller.test_operator import (  # noqa: F401 (fixtures)
    FAULT_POINT,
    cluster_manifest,
    completed_steps,
    harness_env,
    harness_lost_seq,
    sandbox_answers,
    steps_run_after,
    stores,
    tickets,
    wait_for_checkpoint,
)
from tests.testenv.kube import ControlPlane

pytestmark = pytest.mark.testenv

NAMESPACE = "belay-pool"
POOL_SIZE = 2
# A claim waits this long before the pool makes the pods that replace the ones taken.
REFILL_DELAY_S = 4.0
APPROVAL = "approve-implementer.publish.3"


@pytest.fixture(scope="module")
def pool_cluster(kube: ControlPlane) -> ControlPlane:
    from tests.api.kubehelpers import install_crds

    install_crds(kube)
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    kube.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    return kube


@pytest.fixture
def operator(
    pool_cluster: ControlPlane,
    stores: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    settings = OperatorSettings(
        event_store=stores[0],
        artifact_store=stores[1],
        image_pull_policy="Never",
        sandbox_pool_size=POOL_SIZE,
        sandbox_pool_refill_delay_s=REFILL_DELAY_S,
    )
    process = OperatorProcess(pool_cluster, NAMESPACE, settings, tmp_path / "operator.log").start()
    try:
        yield process
    finally:
        process.stop()
        # What the stopped operator leaves: the sessions' pods and its pool (nothing runs them now).
        for selector in (names.LABEL_MANAGED_BY, names.LABEL_SESSION):
            pool_cluster.kubectl(
                "delete", "pods", "-n", NAMESPACE, "-l", selector, "--grace-period=0", "--force", check=False
            )


def policies_written_again(
    kube: ControlPlane, deleted: list[str], loosened: str, describe: Callable[[], str]
) -> None:
    """Delete the NetworkPolicies `deleted` and open `loosened` to all traffic: the operator writes
    each as it was within seconds, not at its next periodic apply (a minute or more away)."""

    def policies() -> dict[str, Any]:
        listed = kubectl_json(kube, "get", "networkpolicies", "-n", NAMESPACE)["items"]
        return {p["metadata"]["name"]: p for p in listed}

    before = policies()
    for policy in deleted:
        kube.kubectl("delete", "networkpolicy", "-n", NAMESPACE, policy)
    everything = {"spec": {"ingress": [{}], "egress": [{}]}}
    patched = kubectl_json(
        kube,
        "patch",
        "networkpolicy",
        "-n",
        NAMESPACE,
        loosened,
        "--type=merge",
        "-p",
        json.dumps(everything),
    )
    assert patched["spec"]["egress"] == [{}], patched

    def written_again() -> bool:
        now = policies()
        return all(
            p in now
            and now[p]["spec"] == before[p]["spec"]
            # A deleted one is a new object.
            and (p not in deleted or now[p]["metadata"]["uid"] != before[p]["metadata"]["uid"])
            for p in [*deleted, loosened]
        )

    wait_for(written_again, "the operator to write the policies again", timeout=20, describe=describe)


def manifest(name: str, inputs: Path | None = None) -> dict[str, Any]:
    """The example in the pool's namespace, waiting for its publish approval; with `inputs`, its
    subagents' inputs are read from there."""
    session = cluster_manifest(name)
    session["metadata"]["namespace"] = NAMESPACE
    del session["spec"]["approvals"]
    if inputs is not None:
        for sub in session["spec"]["subagents"]:
            for item in sub["inputs"]:
                item["source"] = str(inputs)
    return session


def all_pods(kube: ControlPlane) -> dict[str, dict[str, Any]]:
    listed = kubectl_json(kube, "get", "pods", "-n", NAMESPACE)
    return {p["metadata"]["name"]: p for p in listed.get("items", [])}


def pool_pods(kube: ControlPlane, running: bool = True) -> dict[str, dict[str, Any]]:
    return {
        name: pod
        for name, pod in all_pods(kube).items()
        if pod["metadata"]["labels"].get(names.LABEL_COMPONENT) == names.COMPONENT_POOL
        and not pod["metadata"].get("deletionTimestamp")
        and (not running or pod["status"].get("phase") == "Running")
    }


def full_pool(
    kube: ControlPlane, without: frozenset[str] | set[str] = frozenset()
) -> Callable[[], set[str] | None]:
    def probe() -> set[str] | None:
        found = set(pool_pods(kube))
        return found if len(found) == POOL_SIZE and not found & without else None

    return probe


def claimed_by(kube: ControlPlane, session: str) -> dict[str, dict[str, Any]]:
    """The session's sandbox pods that came from the pool, by subagent."""
    return {
        pod["metadata"]["labels"][names.LABEL_SUBAGENT]: pod
        for pod in all_pods(kube).values()
        if pod["metadata"]["labels"].get(names.LABEL_SESSION) == session
        and names.LABEL_TEMPLATE in pod["metadata"]["labels"]
        and not pod["metadata"].get("deletionTimestamp")
    }


def selects(selector: dict[str, str], pod: dict[str, Any]) -> bool:
    return selector.items() <= pod["metadata"]["labels"].items()


def claimed_at(kube: ControlPlane, pod: dict[str, Any]) -> datetime:
    """When the operator's claim (the write that gave the pod its owner) was made."""
    name = pod["metadata"]["name"]
    fields = kubectl_json(kube, "get", "pod", "-n", NAMESPACE, name, "--show-managed-fields")
    managed = fields["metadata"]["managedFields"]
    entry = next(
        (
            e
            for e in managed
            if e["manager"] == names.FIELD_MANAGER
            and "f:ownerReferences" in e["fieldsV1"].get("f:metadata", {})
        ),
        None,
    )
    assert entry is not None, json.dumps(managed, indent=1)
    return datetime.fromisoformat(entry["time"])


class WriteLog:
    """Every write of a pod or a NetworkPolicy of the namespace, with its resourceVersion: the
    control plane's one etcd's revision, so writes of both kinds compare in the order they were
    made (the creation timestamps only tell seconds apart)."""

    def __init__(self, api: Any) -> None:
        core, networking = client.CoreV1Api(api), client.NetworkingV1Api(api)
        self.writes: list[tuple[int, str, str, dict[str, str]]] = []  # (revision, kind, name, labels)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._follow, args=(core.list_namespaced_pod, "Pod"), daemon=True),
            threading.Thread(
                target=self._follow,
                args=(networking.list_namespaced_network_policy, "NetworkPolicy"),
                daemon=True,
            ),
        ]

    def _follow(self, lister: Callable[..., Any], kind: str) -> None:
        version = lister(NAMESPACE).metadata.resource_version
        while not self._stop.is_set():
            for event in watch.Watch().stream(lister, NAMESPACE, resource_version=version, timeout_seconds=1):
                meta = event["object"].metadata
                version = meta.resource_version
                self.writes.append((int(version), kind, meta.name, dict(meta.labels or {})))

    def __enter__(self) -> WriteLog:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def first(self, kind: str, name: str, labelled: str | None = None) -> int:
        """The revision of the first write of the object (with the label, when one is named)."""
        return min(
            revision
            for revision, k, n, labels in self.writes
            if k == kind and n == name and (labelled is None or labelled in labels)
        )


def sandbox_tokens(kube: ControlPlane, session: str) -> dict[str, str]:
    listed = kubectl_json(kube, "get", "secrets", "-n", NAMESPACE, "-l", f"{names.LABEL_SESSION}={session}")
    return {
        s["metadata"]["labels"][names.LABEL_SUBAGENT]: base64.b64decode(s["data"]["token"]).decode()
        for s in listed["items"]
    }


def describer(kube: ControlPlane, operator: OperatorProcess) -> Callable[[], str]:
    def describe() -> str:
        pods = {n: (p["metadata"]["labels"], p["status"].get("phase")) for n, p in all_pods(kube).items()}
        return f"operator log:\n{operator.log()[-4000:]}\npods: {json.dumps(pods, indent=1)}"

    return describe


async def test_a_recovering_attempt_claims_pool_sandboxes_and_completes_the_session(
    pool_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],  # noqa: F811
    tickets: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    kube = pool_cluster
    name = "pooled"
    describe = describer(kube, operator)
    api = load_api_client(str(kube.kubeconfig))
    store = open_event_store(stores[0])
    try:
        with LocalKubelet(
            api, NAMESPACE, tmp_path / "kubelet", extra_env=harness_env(tickets, FAULT_POINT)
        ) as kubelet:
            inputs = tmp_path / "inputs"
            shutil.copytree(REPO_ROOT / "examples/parser-fix/repo", inputs)
            kube.kubectl("apply", "-f", "-", input=json.dumps(manifest(name, inputs)))
            # A session in the namespace: the pool fills for its template (both subagents share it).
            pool = wait_for(full_pool(kube), "a full pool", describe=describe)
            await wait_for_checkpoint(store, names.record_id(NAMESPACE, name), "implementer/fix", describe)
            done_before = completed_steps(fold(await store.read(names.record_id(NAMESPACE, name))))
            # The record holds the inputs now: the next attempt restores them from there and does
            # not read them again (it would fail to: they are gone).
            shutil.rmtree(inputs)

            # The first attempt is frozen after its checkpoint; its pod goes, as a lost node's would.
            kube.kubectl(
                "delete", "pod", "-n", NAMESPACE, f"{name}-harness-0", "--wait=false", "--grace-period=1"
            )
            claimed = wait_for(
                lambda: len(c := claimed_by(kube, name)) == 2 and c,
                "the next attempt's claims",
                describe=describe,
            )
            # Exactly the pool's pods, now the session's: owned by it, labelled for its next attempt.
            assert {pod["metadata"]["name"] for pod in claimed.values()} == pool
            uid = kubectl_json(kube, "get", "agentsession", "-n", NAMESPACE, name)["metadata"]["uid"]
            status = wait_for(
                lambda: (
                    (s := agentsession_status(kube, NAMESPACE, name)).get("harness", {}).get("attempt", 0) > 0
                    and s
                ),
                "the next attempt in the status",
                describe=describe,
            )
            attempt = str(status["harness"]["attempt"])
            policies = {
                p["metadata"]["name"]: p
                for p in kubectl_json(kube, "get", "networkpolicies", "-n", NAMESPACE)["items"]
            }
            for subagent, pod in claimed.items():
                metadata = pod["metadata"]
                assert [o["uid"] for o in metadata["ownerReferences"]] == [uid]
                assert metadata["labels"][names.LABEL_ATTEMPT] == attempt
                assert metadata["labels"][names.LABEL_COMPONENT] == names.COMPONENT_SANDBOX
                # Under the session's policies (in place before the claim), no longer the pool's.
                for policy in (f"{name}-default-deny", f"{name}-sbx-{subagent}"):
                    assert selects(policies[policy]["spec"]["podSelector"]["matchLabels"], pod), policy
                    created = datetime.fromisoformat(policies[policy]["metadata"]["creationTimestamp"])
                    assert created <= claimed_at(kube, pod)
                assert not selects(policies[names.POOL_POLICY]["spec"]["podSelector"]["matchLabels"], pod)
                other = next(s for s in claimed if s != subagent)
                assert not selects(policies[f"{name}-sbx-{other}"]["spec"]["podSelector"]["matchLabels"], pod)
                service = kubectl_json(
                    kube, "get", "service", "-n", NAMESPACE, names.sandbox_service_name(name, subagent)
                )
                assert selects(service["spec"]["selector"], pod)

            # The pool makes new pods for the ones taken, once the claiming attempt's harness pod has
            # had its refill delay to start alone; a claimed pod never comes back to it.
            refilled = wait_for(full_pool(kube, without=pool), "the pool refilled", describe=describe)
            assert not refilled & pool
            claims_made = max(claimed_at(kube, pod) for pod in claimed.values())
            pods = all_pods(kube)
            made = min(datetime.fromisoformat(pods[p]["metadata"]["creationTimestamp"]) for p in refilled)
            # Both times are in whole seconds.
            assert made - claims_made >= timedelta(seconds=REFILL_DELAY_S - 1), (made, claims_made)

            # The next attempt gave each claimed pod its subagent's token, and restored it: it goes on
            # to the publish step, which waits for its approval.
            wait_for(
                lambda: any(
                    p.get("approvalId") == APPROVAL
                    for p in agentsession_status(kube, NAMESPACE, name).get("pendingApprovals") or []
                ),
                "the next attempt to wait for the approval",
                timeout=300,
                describe=describe,
            )
            harness = f"{name}-harness-{attempt}"
            claims = kubelet.pods[harness].root / "volumes" / "sandbox-claims"
            assert sorted(f.name for f in claims.iterdir()) == sorted(claimed)
            tokens = sandbox_tokens(kube, name)
            for subagent, pod in claimed.items():
                port = kubelet.pods[pod["metadata"]["name"]].ports["http"]
                other = next(s for s in claimed if s != subagent)
                assert sandbox_answers(port, tokens[subagent]) == 200
                assert sandbox_answers(port, tokens[other]) == 401
                assert sandbox_answers(port, (claims / subagent).read_text()) == 401  # the key is no token

            # While the session waits (no pass is due), walls someone deletes or loosens come back.
            policies_written_again(
                kube, [f"{name}-default-deny", names.POOL_POLICY], f"{name}-sbx-implementer", describe
            )

            kube.kubectl(
                "patch", "agentsession", name, "-n", NAMESPACE, "--type=merge", "-p",
                json.dumps({"spec": {"approvals": [cluster_manifest()["spec"]["approvals"][0]]}}),
            )  # fmt: skip
            done = wait_for_session_end(kube, NAMESPACE, name, timeout=600, describe=describe)
            assert done["phase"] == "Succeeded", describe()
            # The ended session's pods go, claimed ones with them: none went back to the pool.
            wait_for(lambda: not claimed_by(kube, name) or None, "the claimed pods to go", describe=describe)
            assert not set(pool_pods(kube, running=False)) & pool
            assert all(n in kubelet.started_names for n in pool)
            kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=120s")

        events = await store.read(names.record_id(NAMESPACE, name))
        lost = harness_lost_seq(events)
        assert steps_run_after(events, lost).isdisjoint(done_before)
        assert steps_run_twice(events) == []
        restored = {
            e.payload.subagent
            for e in events
            if isinstance(e, LifecycleEvent) and e.payload.kind == LifecycleKind.RESTORED and e.seq > lost
        }
        assert restored == {"implementer", "researcher"}
    finally:
        await store.close()
        kube.kubectl("delete", "agentsession", name, "-n", NAMESPACE, "--timeout=120s", check=False)


def harness_claim_keys(kube: ControlPlane) -> dict[str, list[str]]:
    """The claim key Secrets each harness pod mounts, by session."""
    mounted: dict[str, list[str]] = {}
    for pod in all_pods(kube).values():
        labels = pod["metadata"]["labels"]
        if labels.get(names.LABEL_COMPONENT) != names.COMPONENT_HARNESS:
            continue
        for volume in pod["spec"]["volumes"]:
            if volume["name"] == "sandbox-claims":
                sources = volume["projected"]["sources"]
                mounted.setdefault(labels[names.LABEL_SESSION], []).extend(
                    s["secret"]["name"] for s in sources
                )
    return mounted


async def test_the_pool_stays_full_replaces_dead_pods_and_no_pod_is_claimed_twice(
    pool_cluster: ControlPlane,
    operator: OperatorProcess,
    stores: tuple[str, str],  # noqa: F811
    tickets: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    kube = pool_cluster
    describe = describer(kube, operator)
    api = load_api_client(str(kube.kubeconfig))
    sessions = ["first", "second", "third"]
    # Every harness runs until the publish step waits for its approval (the spec grants none), and
    # stays there alive: its sandboxes stay claimed and serving. (One that stopped itself would stop
    # renewing its lease too; after the liveness timeout the operator would rightly start the
    # session's next attempt, which claims pool pods of its own whenever the test is that slow.)
    env = harness_env(tickets)
    with (
        LocalKubelet(api, NAMESPACE, tmp_path / "kubelet", extra_env=env) as kubelet,
        WriteLog(api) as writes,
    ):
        try:
            kube.kubectl("apply", "-f", "-", input=json.dumps(manifest(sessions[0])))
            pool = wait_for(full_pool(kube), "a full pool", describe=describe)

            # A pool pod whose server died is deleted and replaced; so is one deleted by force.
            died = sorted(pool)[0]
            kubelet.kill(died)
            pool = wait_for(full_pool(kube, without={died}), "the dead pool pod replaced", describe=describe)
            wait_for(
                lambda: died not in all_pods(kube) or None, "the dead pool pod deleted", describe=describe
            )
            forced = sorted(pool)[0]
            kube.kubectl("delete", "pod", "-n", NAMESPACE, forced, "--grace-period=0", "--force")
            pool = wait_for(
                full_pool(kube, without={forced}), "the deleted pool pod replaced", describe=describe
            )

            # Two new sessions at once, two subagents each, two pods in the pool: each pod is
            # claimed by one of them only; a subagent that finds the pool empty gets a pod made for it.
            both = {"apiVersion": "v1", "kind": "List", "items": [manifest(s) for s in sessions[1:]]}
            kube.kubectl("apply", "-f", "-", input=json.dumps(both))
            wait_for(
                lambda: all(f"{s}-harness-0" in all_pods(kube) for s in sessions[1:]) or None,
                "both sessions' harness pods",
                describe=describe,
            )
            claims: dict[str, tuple[str, str]] = {}  # pod: (session, subagent)
            for session in sessions[1:]:
                for subagent, pod in claimed_by(kube, session).items():
                    pod_name = pod["metadata"]["name"]
                    assert pod_name not in claims, f"{pod_name} claimed by {claims[pod_name]} and {session}"
                    assert len(pod["metadata"]["ownerReferences"]) == 1
                    claims[pod_name] = (session, subagent)
                made = {p for p in all_pods(kube) if p.startswith(f"{session}-sbx-")}
                assert len(claimed_by(kube, session)) + len(made) == 2, describe()
            assert claims and set(claims) <= pool, describe()
            # Each session is on its first attempt (no harness was lost): each harness pod there is
            # the one its session's claims were made for.
            harnesses = {
                n
                for n, p in all_pods(kube).items()
                if p["metadata"]["labels"].get(names.LABEL_COMPONENT) == names.COMPONENT_HARNESS
            }
            assert harnesses == {f"{s}-harness-0" for s in sessions}, describe()
            # Each claim key reaches one harness: the one of the session the pod now belongs to. (The
            # first session may have claimed pods too, if its pass came once the pool was up.)
            keys = harness_claim_keys(kube)
            for session in sessions:
                own = {
                    names.claim_key_secret_name(p["metadata"]["name"])
                    for p in claimed_by(kube, session).values()
                }
                assert sorted(keys.get(session, [])) == sorted(own), (session, describe())
            for pod_name, (session, subagent) in claims.items():
                # Its session's policies were written before the claim: never a moment under none.
                claim = writes.first("Pod", pod_name, labelled=names.LABEL_SESSION)
                for policy in (f"{session}-default-deny", f"{session}-sbx-{subagent}"):
                    assert writes.first("NetworkPolicy", policy) < claim, policy

            # Each claimed pod takes its claiming subagent's token, and no other session's.
            tokens = {s: sandbox_tokens(kube, s) for s in sessions}
            for pod_name, (session, subagent) in claims.items():
                port = kubelet.pods[pod_name].ports["http"]
                token = tokens[session][subagent]
                wait_for(
                    lambda port=port, token=token: sandbox_answers(port, token) == 200 or None,
                    f"{pod_name} claimed with {session}'s token",
                    describe=describe,
                )
                for other in sessions:
                    if other != session:
                        assert sandbox_answers(port, tokens[other][subagent]) == 401

            # The pool fills again with pods of its own; never with one that was claimed.
            refilled = wait_for(full_pool(kube, without=set(claims)), "the pool refilled", describe=describe)
            ever_claimed = {
                n for n, p in all_pods(kube).items() if names.LABEL_SESSION in p["metadata"]["labels"]
            }
            assert not refilled & ever_claimed
        finally:
            # While the kubelet still runs their pods, which go with them.
            kube.kubectl("delete", "agentsession", *sessions, "-n", NAMESPACE, "--timeout=120s", check=False)


async def test_claims_of_one_pool_pod_made_at_once_give_it_to_one_session_only(
    pool_cluster: ControlPlane,
) -> None:
    """The claim is one JSON patch that tests the pod is still in the pool, so the apiserver lets one
    claim through however many are made at once (by two sessions' passes, or two replicas)."""
    settings = OperatorSettings(sandbox_pool_size=1, image_pull_policy="Never")
    kube = KubeClient(load_api_client(str(pool_cluster.kubeconfig)))
    pool = SandboxPool(kube, settings)
    template = SandboxTemplate(settings.sandbox_image, "none")
    # Real sessions (nothing reconciles them here), so the garbage collector keeps what they own.
    claimers = [pending_session(f"claimer-{n}", NAMESPACE, "claim a pool pod") for n in range(4)]
    try:
        await pool.keep({NAMESPACE: {template_id(template, settings): template}})
        (pod,) = [name for name in all_pods(pool_cluster) if name.startswith("belay-pool-")]
        listed = {"apiVersion": "v1", "kind": "List", "items": claimers}
        pool_cluster.kubectl("apply", "-f", "-", input=json.dumps(listed))
        uids = {
            s["metadata"]["name"]: s["metadata"]["uid"]
            for s in kubectl_json(pool_cluster, "get", "agentsessions", "-n", NAMESPACE)["items"]
        }
        sessions = [
            SessionRef(c["metadata"]["name"], NAMESPACE, uids[c["metadata"]["name"]]) for c in claimers
        ]

        won = await asyncio.gather(
            *(
                kube.call(kube.claim_pod, NAMESPACE, pod, claim_patch(ref, "researcher", 0))
                for ref in sessions
            )
        )
        assert won.count(True) == 1, won
        winner = sessions[won.index(True)]
        claimed = all_pods(pool_cluster)[pod]["metadata"]
        assert [o["uid"] for o in claimed["ownerReferences"]] == [winner.uid]
        assert claimed["labels"][names.LABEL_SESSION] == winner.name
        # Nor is it claimed again later, by anyone.
        assert not await kube.call(kube.claim_pod, NAMESPACE, pod, claim_patch(sessions[0], "researcher", 1))
    finally:
        force = ("--grace-period=0", "--force")
        pool_cluster.kubectl(
            "delete", "pods", "-n", NAMESPACE, "-l", names.LABEL_MANAGED_BY, *force, check=False
        )
        names_ = [c["metadata"]["name"] for c in claimers]
        pool_cluster.kubectl("delete", "agentsessions", "-n", NAMESPACE, *names_, check=False)
        kube.close()
