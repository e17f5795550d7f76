from __future__ import annotations

import dataclasses
import json
from typing import Any

from belay.controller import names
from belay.controller.desired import (
    ENV_SANDBOX_TOKEN_DIR,
    EPHEMERAL_HEADROOM_MIB,
    HARNESS_TOKENS_MOUNT,
    TOKEN_KEY,
    TOKEN_MOUNT,
    apply_stages,
    desired_children,
    harness_pod,
    sandbox_endpoint,
    sandbox_token_secret,
)
from belay.controller.settings import ETCD_CREDENTIALS_MOUNT, EgressTarget, OperatorSettings
from belay.harness.git_input import GIT_CREDENTIALS_DIR
from belay.harness.stopping import DRAIN_ENV, STOP_MARGIN_S
from tests.controller.sessions import REF, spec_with, subagent

SETTINGS = OperatorSettings(
    store_egress=[
        EgressTarget(cidr="10.20.0.5/32", ports=[2379]),
        EgressTarget(pod_labels={"app": "s3"}, ports=[9000]),
    ],
    model_egress=[EgressTarget(cidr="162.159.140.245/32", ports=[443])],
    store_secret="belay-stores",
)


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_policies_and_services_are_applied_before_the_sandbox_pods_and_they_before_the_harness() -> None:
    objects = desired_children(REF, spec_with(), SETTINGS, attempt_index=4)
    stages = apply_stages(objects)
    assert sorted(o for stage in stages for o in map(json.dumps, stage)) == sorted(map(json.dumps, objects))
    first, sandboxes, harness = stages
    assert {o["kind"] for o in first} == {"NetworkPolicy", "Service"}
    assert len(by_kind(first, "NetworkPolicy")) == 4  # default deny, the harness's, one per sandbox
    assert sorted(by_kind(sandboxes, "Pod")) == [
        "parser-fix-sbx-implementer-4",
        "parser-fix-sbx-researcher-4",
    ]
    assert [o["metadata"]["name"] for o in harness] == ["parser-fix-harness-4"]
    # A session that ended keeps its Services and policies, and has no pod stage.
    assert apply_stages(desired_children(REF, spec_with(), SETTINGS, attempt_index=None)) == [
        desired_children(REF, spec_with(), SETTINGS, attempt_index=None)
    ]


def test_children_are_owned_labelled_and_named_per_attempt() -> None:
    objects = desired_children(REF, spec_with(), SETTINGS, attempt_index=4)
    for obj in objects:
        assert obj["metadata"]["ownerReferences"] == [REF.owner_reference()]
        assert obj["metadata"]["labels"][names.LABEL_SESSION] == "parser-fix"
        assert obj["metadata"]["namespace"] == "team-a"
        assert len(obj["metadata"]["name"]) <= 63
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == [
        "parser-fix-harness-4",
        "parser-fix-sbx-implementer-4",
        "parser-fix-sbx-researcher-4",
    ]
    assert {p["metadata"]["labels"][names.LABEL_ATTEMPT] for p in pods.values()} == {"4"}
    assert sorted(by_kind(objects, "Service")) == ["sbx-parser-fix-implementer", "sbx-parser-fix-researcher"]
    assert len(by_kind(objects, "NetworkPolicy")) == 4  # default deny, harness, one per sandbox


def test_a_sandbox_service_selects_only_the_current_attempts_pod() -> None:
    services = by_kind(desired_children(REF, spec_with(), SETTINGS, attempt_index=4), "Service")
    selector = services["sbx-parser-fix-researcher"]["spec"]["selector"]
    assert selector == {**names.sandbox_selector("parser-fix", "researcher"), names.LABEL_ATTEMPT: "4"}
    assert services["sbx-parser-fix-researcher"]["spec"]["clusterIP"] == "None"
    pod = by_kind(desired_children(REF, spec_with(), SETTINGS, attempt_index=4), "Pod")[
        "parser-fix-sbx-researcher-4"
    ]
    assert selector.items() <= pod["metadata"]["labels"].items()


def test_a_replaced_sandbox_pod_gets_a_name_of_its_own_and_the_service_moves_to_it() -> None:
    objects = desired_children(REF, spec_with(), SETTINGS, attempt_index=4, replacements={"researcher": 2})
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == [
        "parser-fix-harness-4",
        "parser-fix-sbx-implementer-4",
        "parser-fix-sbx-researcher-4-r2",
    ]
    services = by_kind(objects, "Service")
    replaced = services["sbx-parser-fix-researcher"]["spec"]["selector"]
    assert replaced[names.LABEL_REPLACEMENT] == "2"
    assert replaced.items() <= pods["parser-fix-sbx-researcher-4-r2"]["metadata"]["labels"].items()
    # The lost pod (replacement 1, or the original) no longer matches.
    lost = by_kind(desired_children(REF, spec_with(), SETTINGS, 4, {"researcher": 1}), "Pod")
    assert not replaced.items() <= lost["parser-fix-sbx-researcher-4-r1"]["metadata"]["labels"].items()
    # A sandbox never replaced keeps the selector that also matches pods made before the label.
    assert names.LABEL_REPLACEMENT not in services["sbx-parser-fix-implementer"]["spec"]["selector"]


def test_an_ended_session_keeps_services_and_policies_but_no_pods() -> None:
    objects = desired_children(REF, spec_with(), SETTINGS, attempt_index=None)
    assert by_kind(objects, "Pod") == {}
    assert len(by_kind(objects, "Service")) == 2


def test_every_pod_meets_the_restricted_profile() -> None:
    for pod in by_kind(desired_children(REF, spec_with(), SETTINGS, 0), "Pod").values():
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        assert spec["restartPolicy"] == "Never"
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["readOnlyRootFilesystem"] is True
        assert not any("hostPath" in v for v in spec["volumes"])


def test_harness_pod_gets_the_spec_endpoints_and_secrets_never_inline_credentials() -> None:
    pod = harness_pod(REF, spec_with(), SETTINGS, 2)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["BELAY_HARNESS_INDEX"] == "2"
    assert env["BELAY_EVENT_STORE"] == SETTINGS.event_store
    assert '"goal"' in env["BELAY_SESSION_SPEC"]
    assert sandbox_endpoint(REF, "researcher", SETTINGS) in env["BELAY_SANDBOX_ENDPOINTS"]
    assert container["envFrom"] == [{"secretRef": {"name": "belay-stores"}}]
    assert not any("KEY" in name or "SECRET" in name for name in env)


def test_a_session_on_its_own_stores_gets_its_own_secret_and_never_the_fleets() -> None:
    own = {"events": "etcd://etcd.team-a:2379/belay", "artifacts": "s3://team-a", "secretRef": "team-stores"}
    pod = harness_pod(REF, spec_with(stores=own), SETTINGS, 0)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["envFrom"] == [{"secretRef": {"name": "team-stores"}}]
    assert "belay-stores" not in json.dumps(pod)
    assert (env["BELAY_EVENT_STORE"], env["BELAY_ARTIFACT_STORE"]) == (own["events"], own["artifacts"])


def test_the_fleet_etcds_client_certificate_reaches_the_harness_of_a_fleet_session_only() -> None:
    tls = SETTINGS.model_copy(update={"etcd_credentials_secret": "belay-etcd-client"})
    assert not SETTINGS.etcd_credentials_secret and "belay-etcd-client" not in json.dumps(
        harness_pod(REF, spec_with(), SETTINGS, 0)
    )
    pod = harness_pod(REF, spec_with(), tls, 0)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["BELAY_EVENT_STORE"] == f"{SETTINGS.event_store}?credentials={ETCD_CREDENTIALS_MOUNT}"
    assert {"name": "etcd-credentials", "mountPath": ETCD_CREDENTIALS_MOUNT, "readOnly": True} in container[
        "volumeMounts"
    ]
    assert "belay-etcd-client" in secret_names(pod)
    # A session on its own stores reaches its own etcd with its own Secret: never the fleet's certificate.
    own = {"events": "etcd://etcd.team-a:2379/belay", "artifacts": "s3://team-a", "secretRef": "team-stores"}
    tenant = harness_pod(REF, spec_with(stores=own), tls, 0)
    assert "belay-etcd-client" not in secret_names(tenant) and ETCD_CREDENTIALS_MOUNT not in json.dumps(
        tenant
    )
    sandboxes = [
        o
        for o in desired_children(REF, spec_with(), tls, 0)
        if o["kind"] == "Pod" and o["metadata"]["labels"][names.LABEL_COMPONENT] == names.COMPONENT_SANDBOX
    ]
    assert sandboxes and not any("belay-etcd-client" in secret_names(pod) for pod in sandboxes)


def secret_names(pod: dict[str, Any]) -> set[str]:
    """Every Secret a pod can read: volumes (plain and projected), env and envFrom."""
    found = set()
    for volume in pod["spec"]["volumes"]:
        if "secret" in volume:
            found.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                found.add(source["secret"]["name"])
    for container in pod["spec"]["containers"]:
        found |= {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}
        for item in container.get("env", []):
            if "secretKeyRef" in item.get("valueFrom", {}):
                found.add(item["valueFrom"]["secretKeyRef"]["name"])
    return found


def test_each_sandbox_pod_can_read_its_own_token_and_nothing_that_reaches_the_record() -> None:
    spec = spec_with(executor={"type": "openai", "model": "gpt-5", "credentialsSecret": "model-keys"})
    for replacements in ({}, {"researcher": 2}):
        pods = by_kind(desired_children(REF, spec, SETTINGS, 3, replacements), "Pod")
        sandboxes = {
            p["metadata"]["labels"][names.LABEL_SUBAGENT]: p for n, p in pods.items() if "-sbx-" in n
        }
        assert sorted(sandboxes) == ["implementer", "researcher"]
        for name, pod in sandboxes.items():
            own = names.sandbox_token_secret_name("parser-fix", name, REF.uid)
            assert secret_names(pod) == {own}
            [token] = [v for v in pod["spec"]["volumes"] if "secret" in v]
            assert token["secret"] == {"secretName": own, "defaultMode": 0o400}
            (container,) = pod["spec"]["containers"]
            assert f"{TOKEN_MOUNT}/{TOKEN_KEY}" in container["command"]
            # No store location or credential, no service account token, no API address.
            assert "env" not in container and "envFrom" not in container
            assert pod["spec"]["automountServiceAccountToken"] is False
            assert pod["spec"]["enableServiceLinks"] is False
            text = json.dumps(pod)
            for reaching in (SETTINGS.event_store, SETTINGS.artifact_store, "belay-stores", "model-keys"):
                assert reaching not in text
        assert secret_names(sandboxes["researcher"]) != secret_names(sandboxes["implementer"])


def test_the_harness_reads_every_sandbox_token_one_file_each() -> None:
    pod = harness_pod(REF, spec_with(), SETTINGS, 0)
    [tokens] = [v for v in pod["spec"]["volumes"] if v["name"] == "sandbox-tokens"]
    assert tokens["projected"]["sources"] == [
        {
            "secret": {
                "name": names.sandbox_token_secret_name("parser-fix", sub, REF.uid),
                "items": [{"key": TOKEN_KEY, "path": sub}],
            }
        }
        for sub in ("researcher", "implementer")
    ]
    (container,) = pod["spec"]["containers"]
    assert {"name": "sandbox-tokens", "mountPath": HARNESS_TOKENS_MOUNT, "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": ENV_SANDBOX_TOKEN_DIR, "value": HARNESS_TOKENS_MOUNT} in container["env"]


def test_every_subagent_gets_a_token_secret_of_its_own() -> None:
    first = sandbox_token_secret(REF, "researcher", "t1")
    second = sandbox_token_secret(REF, "implementer", "t2")
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert first["metadata"]["name"] == names.sandbox_token_secret_name("parser-fix", "researcher", REF.uid)
    assert first["stringData"] == {TOKEN_KEY: "t1"}
    assert first["metadata"]["ownerReferences"] == [REF.owner_reference()]
    assert names.sandbox_token_secret_name("s" * 60, "a" * 40, REF.uid) != names.sandbox_token_secret_name(
        "s" * 60, "a" * 39 + "b", REF.uid
    )


def test_a_session_created_again_under_its_name_gets_token_secrets_of_its_own() -> None:
    """The Secret of a deleted session is owned by it and goes with it: a new session of the same
    name must not take it for its own (its pods would lose their token to the garbage collector)."""
    again = dataclasses.replace(REF, uid="5d0c2f9e-0000-4000-8000-000000000002")
    assert again.uid[:8] != REF.uid[:8]
    old, new = sandbox_token_secret(REF, "researcher", "t1"), sandbox_token_secret(again, "researcher", "t2")
    assert old["metadata"]["name"] != new["metadata"]["name"]
    assert new["metadata"]["ownerReferences"] == [again.owner_reference()]


def test_no_sandbox_egress_reaches_a_store_named_by_address() -> None:
    settings = SETTINGS.model_copy(
        update={
            "store_egress": [
                EgressTarget(cidr="52.216.8.9/32", ports=[443]),
                EgressTarget(cidr="2600:1f18::5/128", ports=[443]),
                EgressTarget(cidr="10.20.0.5/32", ports=[9000]),
            ]
        }
    )
    subagents = [
        subagent("web", "internet"),
        subagent("fetch", "allowlist", ["52.216.8.0/24", "52.216.8.9", "151.101.0.0/16"]),
    ]
    objects = desired_children(REF, spec_with(subagents=subagents), settings, 0)
    policies = by_kind(objects, "NetworkPolicy")

    def blocks(name: str) -> list[dict[str, Any]]:
        egress = policies[name]["spec"]["egress"]
        return [peer["ipBlock"] for rule in egress for peer in rule["to"] if "ipBlock" in peer]

    internet = {b["cidr"]: b["except"] for b in blocks("parser-fix-sbx-web")}
    assert "52.216.8.9/32" in internet["0.0.0.0/0"]
    assert "10.20.0.5/32" not in internet["0.0.0.0/0"]  # inside 10.0.0.0/8, cut already
    assert "2600:1f18::5/128" in internet["2000::/3"]
    assert blocks("parser-fix-sbx-fetch") == [
        {"cidr": "52.216.8.0/24", "except": ["52.216.8.9/32"]},
        {"cidr": "151.101.0.0/16"},
    ]


def _policy(spec_subagents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    objects = desired_children(REF, spec_with(subagents=spec_subagents), SETTINGS, 0)
    return by_kind(objects, "NetworkPolicy")[name]["spec"]


def test_default_deny_selects_every_pod_of_the_session() -> None:
    deny = _policy([subagent("a")], "parser-fix-default-deny")
    assert deny == {
        "podSelector": {"matchLabels": {names.LABEL_SESSION: "parser-fix"}},
        "policyTypes": ["Ingress", "Egress"],
    }


def test_sandbox_accepts_only_its_harness_and_profile_none_has_no_egress() -> None:
    policy = _policy([subagent("a")], "parser-fix-sbx-a")
    assert policy["podSelector"]["matchLabels"] == names.sandbox_selector("parser-fix", "a")
    assert policy["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": names.harness_selector("parser-fix")}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        }
    ]
    assert policy["egress"] == []
    assert policy["policyTypes"] == ["Ingress", "Egress"]


def test_internet_profile_still_blocks_cluster_ranges_and_the_metadata_address() -> None:
    egress = _policy([subagent("web", "internet")], "parser-fix-sbx-web")["egress"]
    blocks = {b["cidr"]: b["except"] for rule in egress for peer in rule["to"] if (b := peer.get("ipBlock"))}
    for cut in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"):
        assert cut in blocks["0.0.0.0/0"]
    assert sorted(blocks) == ["0.0.0.0/0", "2000::/3"]  # IPv6: global unicast only
    dns = egress[0]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def test_allowlist_opens_only_named_addresses() -> None:
    allow = ["151.101.0.0/16", "93.184.215.14", "2a04:4e42::/32"]
    egress = _policy([subagent("fetch", "allowlist", allow)], "parser-fix-sbx-fetch")["egress"]
    blocks = [peer["ipBlock"] for rule in egress for peer in rule["to"] if "ipBlock" in peer]
    assert blocks == [{"cidr": "151.101.0.0/16"}, {"cidr": "93.184.215.14/32"}, {"cidr": "2a04:4e42::/32"}]


def test_harness_reaches_its_sandboxes_the_stores_and_the_model_only() -> None:
    policy = _policy([subagent("a")], "parser-fix-harness")
    assert policy["ingress"] == []
    peers = [peer for rule in policy["egress"] for peer in rule["to"]]
    assert {"podSelector": {"matchLabels": names.sandbox_selector("parser-fix")}} in peers
    assert {"ipBlock": {"cidr": "10.20.0.5/32"}} in peers
    assert {"podSelector": {"matchLabels": {"app": "s3"}}} in peers
    assert {"ipBlock": {"cidr": "162.159.140.245/32"}} in peers
    assert not any(p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0" for p in peers)


def test_long_names_are_shortened_without_colliding() -> None:
    first = names.sandbox_service_name("s" * 63, "a" * 40)
    second = names.sandbox_service_name("s" * 63, "a" * 39 + "b")
    assert len(first) <= 63 and len(second) <= 63
    assert first != second
    assert names.dns_label("9lives", "sbx") == names.dns_label("9lives", "sbx")
    assert names.dns_label("9lives", "sbx")[0].isalpha()


def test_harness_and_sandbox_pods_get_a_grace_period_above_the_harness_drain() -> None:
    settings = SETTINGS.model_copy(update={"stop_drain_s": 45})
    pods = by_kind(desired_children(REF, spec_with(), settings, attempt_index=0), "Pod")
    for pod in pods.values():
        assert pod["spec"]["terminationGracePeriodSeconds"] == 45 + STOP_MARGIN_S, pod["metadata"]["name"]
    harness = pods["parser-fix-harness-0"]["spec"]["containers"][0]
    assert {"name": DRAIN_ENV, "value": "45"} in harness["env"]
    sandbox = pods["parser-fix-sbx-researcher-0"]["spec"]["containers"][0]
    argv = sandbox["command"] + sandbox.get("args", [])
    assert argv[argv.index("--drain-s") + 1] == "45"


def test_a_sandbox_pod_carries_the_manifests_resource_walls() -> None:
    walled = {**subagent("builder"), "resources": {"processes": 64, "memoryMib": 128, "diskMib": 16}}
    spec = spec_with(subagents=[walled, subagent("researcher")])
    pods = by_kind(desired_children(REF, spec, SETTINGS, attempt_index=0), "Pod")
    sandbox = pods["parser-fix-sbx-builder-0"]["spec"]
    container = sandbox["containers"][0]
    assert container["resources"]["limits"] == {
        "cpu": "2000m",
        "memory": "128Mi",
        "ephemeral-storage": f"{16 + EPHEMERAL_HEADROOM_MIB}Mi",
    }
    volumes = {volume["name"]: volume for volume in sandbox["volumes"]}
    assert volumes["workspace"]["emptyDir"] == {"sizeLimit": f"{16 + EPHEMERAL_HEADROOM_MIB}Mi"}
    argv = container["command"]
    # The server stops a command at each figure, before the kubelet's own walls would lose the pod.
    for option, value in [
        ("--max-processes", "64"),
        ("--max-memory-mib", "128"),
        ("--max-disk-mib", "16"),
        ("--max-command-s", "600"),
        ("--cgroup", "/sys/fs/cgroup"),
        ("--disk-path", "/tmp"),
    ]:
        assert argv[argv.index(option) + 1] == value, option
    assert "--rlimits" not in argv
    # A subagent without `resources` gets the defaults.
    other = pods["parser-fix-sbx-researcher-0"]["spec"]["containers"][0]
    assert other["resources"]["limits"]["memory"] == "2048Mi"
    assert other["command"][other["command"].index("--max-processes") + 1] == "1024"


def test_a_git_inputs_credentials_reach_the_harness_pod_as_files_and_never_a_sandbox() -> None:
    revision = "0123456789abcdef0123456789abcdef01234567"
    url = "https://git.example.com/team-a/project.git"

    def git_subagent(name: str, secret: str | None) -> dict[str, Any]:
        git = {"url": url, "revision": revision} | ({"credentialsSecret": secret} if secret else {})
        return {**subagent(name), "inputs": [{"git": git, "target": "repo"}], "declared": ["repo/*"]}

    spec = spec_with(
        subagents=[git_subagent("a", "git-token"), git_subagent("b", "git-token"), git_subagent("c", None)]
    )
    objects = desired_children(REF, spec, SETTINGS, 0)
    pods = by_kind(objects, "Pod")
    harness = pods["parser-fix-harness-0"]
    container = harness["spec"]["containers"][0]
    # One volume for the Secret both inputs name, mounted where belay.harness.git_input reads it.
    [volume] = [v for v in harness["spec"]["volumes"] if v.get("secret", {}).get("secretName") == "git-token"]
    assert {
        "name": volume["name"],
        "mountPath": str(GIT_CREDENTIALS_DIR / "git-token"),
        "readOnly": True,
    } in (container["volumeMounts"])
    # Files, not environment: nothing of the Secret is in the spec the harness is given, nor in env.
    assert not any("git-token" in json.dumps(e.get("valueFrom", {})) for e in container["env"])
    sandboxes = [p for n, p in pods.items() if "-sbx-" in n]
    assert len(sandboxes) == 3 and not any("git-token" in secret_names(p) for p in sandboxes)
    # The harness reaches the git servers the chart lists (sessions.gitEgress), and no sandbox does.
    git_server = EgressTarget(cidr="198.51.100.7/32", ports=[443])
    policies = by_kind(
        desired_children(REF, spec, SETTINGS.model_copy(update={"git_egress": [git_server]}), 0),
        "NetworkPolicy",
    )
    reach = {name: json.dumps(p["spec"].get("egress", [])) for name, p in policies.items()}
    assert "198.51.100.7/32" in reach["parser-fix-harness"]
    assert not any(
        "198.51.100.7/32" in rules for name, rules in reach.items() if name != "parser-fix-harness"
    )
    # A session whose git inputs name no Secret mounts none.
    plain = harness_pod(REF, spec_with(subagents=[git_subagent("c", None)]), SETTINGS, 0)
    assert str(GIT_CREDENTIALS_DIR) not in json.dumps(plain)
