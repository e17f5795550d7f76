"""The real test environment does what the issue asks: a v1.34 control plane that stores and
validates custom resources, helm, an S3 server with presigned URLs that keeps its data across a
restart, etcd (single and a three-member cluster), and nothing left running afterwards."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.testenv.availability import (
    BUILDS_UNDER_WAY_ENV,
    outcome_when_missing,
    require_built,
    unavailable,
    wait_for_builds_under_way,
)
from tests.testenv.binaries import REPO_ROOT, component, pinned_versions
from tests.testenv.env import still_ours
from tests.testenv.etcd import EtcdCluster
from tests.testenv.fixtures import pytest_collection_modifyitems, pytest_runtest_setup
from tests.testenv.host import HostSnapshot
from tests.testenv.kube import ControlPlane, KubectlError
from tests.testenv.network import free_port, http_post_json
from tests.testenv.node import acquire_node, node_missing_reason, read_owner, release_node, shim_pids
from tests.testenv.polling import wait_until
from tests.testenv.processes import ManagedProcess, group_members, pid_alive, pid_start_ticks
from tests.testenv.s3 import S3Server
from tests.testenv.state import ProcessRecord, TestEnvState

# --- pure parts -------------------------------------------------------------------------------


def test_pinned_versions_come_from_lib_sh() -> None:
    text = "X=1\nBELAY_KUBE_VERSION=v1.2.3\nBELAY_S3_VERSION=v9.9.9 # note\n  BELAY_NOT_VERSION=no\n"
    assert pinned_versions(text) == {"kube": "v1.2.3", "s3": "v9.9.9"}
    real = pinned_versions()
    assert real["kube"].startswith("v1.34.")
    assert component("kubernetes").bin_dir.name == f"kubernetes-{real['kube']}"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "skip"),
        ({"CI": "false"}, "skip"),
        ({"CI": ""}, "skip"),
        ({"CI": "true"}, "fail"),
        ({"CI": "TRUE"}, "fail"),
    ],
)
def test_missing_component_skips_except_under_ci(environ: dict[str, str], expected: str) -> None:
    assert outcome_when_missing(environ) == expected


def test_unavailable_raises_skip_or_fail() -> None:
    with pytest.raises(pytest.skip.Exception, match="etcd is not built"):
        unavailable("etcd is not built", environ={})
    with pytest.raises(pytest.fail.Exception, match=r"CI=true.*etcd is not built"):
        unavailable("etcd is not built", environ={"CI": "true"})


def test_require_built_names_the_build_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BELAY_CACHE", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    assert component("etcd").missing() == ["etcd", "etcdctl"]
    with pytest.raises(pytest.skip.Exception, match=r"hack/build-etcd\.sh"):
        require_built("etcd")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"hack/build-etcd\.sh"):
        require_built("etcd")


def test_a_component_test_waits_for_the_builds_under_way_and_only_then(tmp_path: Path) -> None:
    status = tmp_path / "builds.status"
    started = time.monotonic()
    wait_for_builds_under_way(environ={})  # no builds started beside the tests: no wait
    assert time.monotonic() - started < 1
    writer = threading.Timer(1.5, lambda: status.write_text("0\n"))
    writer.start()
    try:
        wait_for_builds_under_way(environ={BUILDS_UNDER_WAY_ENV: str(status)})
        assert status.exists()  # returned only once the script wrote the builds' status
    finally:
        writer.cancel()


class _Item:
    """What the collection hook reads and sets of a pytest item."""

    def __init__(self, path: str, fixturenames: tuple[str, ...] = (), marks: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.fixturenames = list(fixturenames)
        self.marks = list(marks)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return getattr(pytest.mark, name).mark if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def test_the_tests_that_need_no_built_component_are_collected_first() -> None:
    """`make test` runs the suite while the builds may still run: a test that asks for a component
    is marked testenv, the files without such a test come first, and in each part the files with
    a slow test lead; otherwise the order stays."""
    crds = _Item("tests/api/test_crds.py", fixturenames=("kube", "tmp_path"))
    crds_plain = _Item("tests/api/test_crds.py")
    cli = _Item("tests/cli/test_errors.py")
    drill = _Item("tests/cli/test_drill.py", marks=("slow",))
    etcd = _Item("tests/stores/test_etcd.py", marks=("testenv",))
    node = _Item("tests/node/test_pods.py", fixturenames=("node_cluster",))
    items = [crds, crds_plain, cli, drill, etcd, node]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert items == [drill, cli, crds, crds_plain, etcd, node]
    assert "testenv" in crds.marks and {"testenv", "node"} <= set(node.marks)
    assert "testenv" not in cli.marks + crds_plain.marks


def test_free_ports_handed_out_together_are_distinct() -> None:
    # The components of one cluster get their ports before any binds: the kernel, asked again and
    # again for a free port, offers some twice in a few hundred asks (an etcd cluster once got the
    # same peer port for two members).
    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports)


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    # A shell with a background child: stopping must reach the grandchild, not only the shell.
    process = ManagedProcess("sleeper", ["sh", "-c", "sleep 300 & sleep 300 & wait"], tmp_path / "log")
    process.start()
    assert process.pid is not None
    members = wait_until(
        lambda: group_members(process.pid),
        "the shell and its two children",
        until=lambda members: len(members) >= 3,
        timeout=10,
        interval=0.02,
    )
    assert len(members) == 3
    process.stop()
    assert group_members(process.pid) == []
    assert not any(pid_alive(pid) for pid in members)


def test_kill_is_a_crash_of_the_whole_group(tmp_path: Path) -> None:
    # `trap '' TERM` ignores a polite stop; kill() must not depend on the process agreeing.
    process = ManagedProcess("stubborn", ["sh", "-c", "trap '' TERM; sleep 300 & wait"], tmp_path / "log")
    process.start()
    assert process.pid is not None
    process.kill()
    assert group_members(process.pid) == []


def test_down_spares_a_process_that_only_shares_a_recorded_pid(tmp_path: Path) -> None:
    process = ManagedProcess("sleeper", ["sleep", "300"], tmp_path / "log")
    process.start()
    try:
        assert process.pid is not None
        ticks = pid_start_ticks(process.pid)
        assert ticks is not None
        record = ProcessRecord(name="x", pid=process.pid, executable="sleep", start_ticks=ticks, log="")
        assert still_ours(record)
        # Same pid and binary, another start time: a reused pid, which `down` must leave alone.
        assert not still_ours(record.model_copy(update={"start_ticks": ticks + 1}))
        assert not still_ours(record.model_copy(update={"executable": "/bin/other"}))
    finally:
        process.stop()
    assert not still_ours(record)


_OWNER_SCRIPT = """
import sys, time
from pathlib import Path
from tests.testenv.processes import ManagedProcess
child = ManagedProcess("sleeper", sys.argv[2:], Path(sys.argv[1]))
child.start()
print(child.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize(
    ("signum", "argv"),
    [
        (signal.SIGTERM, ["sh", "-c", "sleep 300 & wait"]),
        (signal.SIGINT, ["sh", "-c", "sleep 300 & wait"]),
        # The kernel's parent-death signal reaches the direct child only, which is enough for the
        # servers here (each is a single process); a shell's background children are not covered.
        (signal.SIGKILL, ["sleep", "300"]),
    ],
)
def test_children_die_with_the_process_that_started_them(
    tmp_path: Path, signum: int, argv: list[str]
) -> None:
    # SIGTERM reaches the guard, SIGINT unwinds to atexit, SIGKILL leaves only the kernel's
    # parent-death signal: in every case the started group must be gone.
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER_SCRIPT, str(tmp_path / "log"), *argv],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        # As from a terminal: a shell's background job starts with SIGINT ignored, and Python then
        # leaves it ignored, so the owner would never see the SIGINT this test sends.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert owner.stdout is not None
    child_pid = int(owner.stdout.readline())
    assert pid_alive(child_pid)
    owner.send_signal(signum)
    owner.wait(timeout=30)
    wait_until(
        lambda: group_members(child_pid),
        "the started group to be gone",
        until=lambda members: members == [],
        timeout=15,
        interval=0.05,
    )


# --- Kubernetes -------------------------------------------------------------------------------

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ropes.testenv.belay.dev
spec:
  group: testenv.belay.dev
  scope: Namespaced
  names: {plural: ropes, singular: rope, kind: Rope}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [lengthMeters]
            properties:
              lengthMeters: {type: integer, minimum: 1}
              dynamic: {type: boolean}
            x-kubernetes-validations:
            - rule: "self.lengthMeters <= 100"
              message: "a rope is at most 100 m"
"""


def test_kubectl_reports_the_pinned_server_version(kube: ControlPlane) -> None:
    report = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert report["serverVersion"]["gitVersion"] == pinned_versions()["kube"]
    assert report["serverVersion"]["gitVersion"].startswith("v1.34.")
    assert kube.version == report["serverVersion"]["gitVersion"]


def test_crd_and_object_are_applied_validated_and_read_back(kube: ControlPlane) -> None:
    kube.kubectl("apply", "-f", "-", input=CRD)
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ropes.testenv.belay.dev")
    name = f"rope-{uuid.uuid4().hex[:8]}"
    rope: dict[str, Any] = {
        "apiVersion": "testenv.belay.dev/v1",
        "kind": "Rope",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"lengthMeters": 60, "dynamic": True},
    }
    kube.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(rope))
    stored = json.loads(kube.kubectl("get", "rope", name, "-n", "default", "-o", "json").stdout)
    assert stored["spec"] == {"lengthMeters": 60, "dynamic": True}
    assert stored["metadata"]["uid"]

    # The real apiserver enforces both the structural schema and the CEL rule.
    too_long = {
        **rope,
        "metadata": {**rope["metadata"], "name": name + "-long"},
        "spec": {"lengthMeters": 200},
    }
    with pytest.raises(KubectlError, match="at most 100 m"):
        kube.kubectl("apply", "-f", "-", input=json.dumps(too_long))
    wrong_type = {**rope, "spec": {"lengthMeters": "sixty"}}
    assert kube.kubectl("apply", "-f", "-", input=json.dumps(wrong_type), check=False).returncode != 0


def test_controller_manager_reconciles_a_new_namespace(kube: ControlPlane) -> None:
    # The default ServiceAccount in a new namespace is created by kube-controller-manager, so its
    # appearance shows that the controller manager is connected and working.
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", namespace)
    wait_until(
        lambda: (
            kube.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0
        ),
        f"the default service account of {namespace}",
        timeout=60,
        interval=0.2,
    )
    assert kube.kubectl("get", "serviceaccount", "default", "-n", namespace, "-o", "name").stdout.strip() == (
        "serviceaccount/default"
    )


def test_rbac_is_enforced_and_service_account_tokens_are_issued(kube: ControlPlane) -> None:
    # The admin certificate is in system:masters; anyone else has only what RBAC grants.
    assert kube.kubectl("auth", "can-i", "create", "pods").stdout.strip() == "yes"
    stranger = kube.kubectl("auth", "can-i", "create", "pods", "--as=stranger", check=False)
    assert stranger.stdout.strip() == "no"
    # The apiserver signs service-account tokens with the generated key, under its own issuer.
    account = f"sa-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "serviceaccount", account, "-n", "default")
    token = kube.kubectl("create", "token", account, "-n", "default").stdout.strip()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["iss"] == kube.server
    assert claims["sub"] == f"system:serviceaccount:default:{account}"


def test_helm_reports_its_version_and_installs_into_the_control_plane(
    helm_bin: Path, kube: ControlPlane, tmp_path: Path
) -> None:
    version = subprocess.run([helm_bin, "version", "--short"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith(pinned_versions()["helm"])

    chart = tmp_path / "anchor"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: anchor\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: anchor\n"
        "data:\n  held: {{ .Values.held | quote }}\n"
    )
    (chart / "values.yaml").write_text("held: 'yes'\n")
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "h"), "HELM_CONFIG_HOME": str(tmp_path / "h")}
    namespace = f"helm-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [helm_bin, "install", "anchor", chart, "--kubeconfig", kube.kubeconfig, "-n", namespace,
         "--create-namespace", "--wait", "--timeout", "60s"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    data = json.loads(kube.kubectl("get", "configmap", "anchor", "-n", namespace, "-o", "json").stdout)[
        "data"
    ]
    assert data == {"held": "yes"}


# --- S3 ---------------------------------------------------------------------------------------


def test_bucket_object_and_multipart_round_trip(s3_server: S3Server) -> None:
    s3 = s3_server.client()
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="notes/a.txt", Body=b"anchor one")
    assert s3.get_object(Bucket=bucket, Key="notes/a.txt")["Body"].read() == b"anchor one"

    part_size = 5 * 1024 * 1024  # the S3 minimum for every part but the last
    parts_data = [os.urandom(part_size), b"tail"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big.bin")
    parts: list[Any] = []
    for number, data in enumerate(parts_data, start=1):
        etag = s3.upload_part(
            Bucket=bucket, Key="big.bin", UploadId=upload["UploadId"], PartNumber=number, Body=data
        )
        parts.append({"PartNumber": number, "ETag": etag["ETag"]})
    s3.complete_multipart_upload(
        Bucket=bucket, Key="big.bin", UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == b"".join(parts_data)


def test_presigned_get_url_is_fetchable_without_credentials(s3_server: S3Server) -> None:
    s3 = s3_server.client()
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="deliverable.tar", Body=b"ready for review")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "deliverable.tar"}, ExpiresIn=300
    )
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"ready for review"
    tampered = url.replace("deliverable.tar", "other.tar")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered, timeout=10)
    assert refused.value.code == 403


def test_s3_restart_on_the_same_port_keeps_the_data(s3_server: S3Server) -> None:
    s3 = s3_server.client()
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="kept", Body=b"still here")
    endpoint = s3_server.endpoint_url
    s3_server.stop()
    with pytest.raises(Exception, match=r"Could not connect|Connect"):
        s3_server.client().list_buckets()
    s3_server.start()
    assert s3_server.endpoint_url == endpoint
    assert s3_server.client().get_object(Bucket=bucket, Key="kept")["Body"].read() == b"still here"


def test_a_server_left_stopped_runs_again_for_the_next_test(
    s3_server: S3Server, request: pytest.FixtureRequest
) -> None:
    s3_server.stop()
    pytest_runtest_setup(request.node)  # what pytest calls before the next test
    assert s3_server.process.running()
    assert "Buckets" in s3_server.client().list_buckets()


# --- etcd -------------------------------------------------------------------------------------


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_etcd_endpoint_stores_and_reads_keys(etcd_endpoint: str) -> None:
    key = f"/test-testenv/{uuid.uuid4().hex}"
    http_post_json(f"{etcd_endpoint}/v3/kv/put", {"key": _b64(key), "value": _b64("belay")})
    found = http_post_json(f"{etcd_endpoint}/v3/kv/range", {"key": _b64(key)})
    assert [kv["value"] for kv in found["kvs"]] == [_b64("belay")]


def test_etcd_cluster_keeps_serving_without_its_leader(etcd_cluster: EtcdCluster) -> None:
    assert len(etcd_cluster.endpoints) == len(etcd_cluster.member_names) == 3
    leader = etcd_cluster.wait_for_leader()
    etcd_cluster.stop_member(leader)
    assert leader not in etcd_cluster.running_members()
    new_leader = etcd_cluster.wait_for_leader()
    assert new_leader != leader
    survivor = etcd_cluster.endpoint_of(new_leader)
    tls = etcd_cluster.members[new_leader].client_context
    http_post_json(f"{survivor}/v3/kv/put", {"key": _b64("/after-loss"), "value": _b64("1")}, context=tls)

    etcd_cluster.start_member(leader)
    # The restarted member caught up with the write made while it was down.
    rejoined = etcd_cluster.endpoint_of(leader)
    found = http_post_json(
        f"{rejoined}/v3/kv/range", {"key": _b64("/after-loss"), "serializable": False}, context=tls
    )
    assert [kv["value"] for kv in found["kvs"]] == [_b64("1")]


# --- the command line: up, use, down, nothing left ----------------------------------------------


@pytest.mark.slow
def test_up_then_down_leaves_no_process_behind(tmp_path: Path) -> None:
    require_built("kubernetes", "etcd", "s3")
    env = {**os.environ, "BELAY_TESTENV_RUN": str(tmp_path / "run")}
    command = [sys.executable, "-m", "tests.testenv"]
    up = subprocess.run(
        [*command, "up", "--no-node"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    state_file = tmp_path / "run" / "testenv.json"
    state = TestEnvState.read(state_file) if state_file.exists() else None
    try:
        assert up.returncode == 0, up.stderr
        assert state is not None
        assert "kubectl --kubeconfig" in up.stdout
        pids = [p.pid for p in state.processes]
        assert len(pids) == 6  # etcd, S3, and the control plane's etcd, apiserver, manager, scheduler
        assert all(pid_alive(pid) for pid in pids)

        version = subprocess.run(
            [state.kubectl, "--kubeconfig", state.kubeconfig, "version", "-o", "json"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert json.loads(version.stdout)["serverVersion"]["gitVersion"].startswith("v1.34.")
    finally:
        down = subprocess.run(
            [*command, "down"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(pid) for pid in pids)
    assert not any(group_members(pid) for pid in pids)
    assert not state_file.exists()
    assert not Path(state.run_dir).exists()


@pytest.mark.slow
@pytest.mark.node
def test_up_starts_a_ready_node_and_down_leaves_the_machine_as_it_was(tmp_path: Path) -> None:
    """`up` with a node: the node is Ready and runs pods (CoreDNS); `down` stops every process and
    puts back every mount, network namespace, link, nftables table, ipset, route, cgroup, folder
    and sysctl the node changed: the machine's state afterwards is compared with before."""
    require_built("kubernetes", "etcd", "s3")
    reason = node_missing_reason()
    if reason:
        unavailable(reason)
    env = {**os.environ, "BELAY_TESTENV_RUN": str(tmp_path / "run")}
    command = [sys.executable, "-m", "tests.testenv"]
    # Waits, like `up` itself, while another run's node holds the machine, so both compare the
    # machine with no node on it.
    acquire_node(tmp_path, tmp_path / "unused.sock", tmp_path / "unused")
    before = HostSnapshot.take()
    release_node()
    up = subprocess.run([*command, "up"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    state_file = tmp_path / "run" / "testenv.json"
    state = TestEnvState.read(state_file) if state_file.exists() else None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None and state.node is not None
        # What `up` printed: `kubectl get nodes`, with the node Ready.
        assert re.search(rf"^{state.node.name}\s+Ready\s", up.stdout, flags=re.MULTILINE), up.stdout
        kubectl = [state.kubectl, "--kubeconfig", state.kubeconfig]
        pods = subprocess.run(
            [*kubectl, "get", "pods", "-n", "kube-system", "-o", "json"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        (coredns,) = json.loads(pods.stdout)["items"]
        assert coredns["status"]["phase"] == "Running" and coredns["spec"]["nodeName"] == state.node.name
        pids = [p.pid for p in state.processes]
        names = {p.name for p in state.processes}
        assert {"containerd", "kubelet", "kube-proxy", "kube-router"} <= names
    finally:
        down = subprocess.run(
            [*command, "down"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
        )
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(pid_alive(pid) for pid in pids)
    assert not any(group_members(pid) for pid in pids)
    assert shim_pids(state.node.containerd_socket) == []
    assert before.differences(HostSnapshot.take(), own_paths=(state.run_dir,)) == []
    assert read_owner() is None
