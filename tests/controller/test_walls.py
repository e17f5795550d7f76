"""The walls between a tenant and the fleet, as the operator's pure functions draw them: images and
RuntimeClasses by name among those the chart allows, a session's own stores opened with its own
Secret only, sandbox egress never wider than `internet` and `internet` never reaching a
special-purpose range, sandbox pods placed where the chart puts untrusted code."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from belay.controller import admission
from belay.controller.desired import desired_children, harness_pod, sandbox_pod
from belay.controller.pool import SandboxTemplate, pool_pod, template_of
from belay.controller.settings import OperatorSettings
from tests.controller.sessions import REF, spec_with, subagent

SETTINGS = OperatorSettings(
    harness_image="registry.example/belay-harness:1.0",
    sandbox_image="registry.example/belay-harness:1.0",
    harness_images={"gpu": "registry.example/belay-harness-gpu:1.0"},
    sandbox_images={"python-3-12": "registry.example/sandbox-python:3.12"},
    store_secret="belay-stores",
)

# The IANA IPv4 and IPv6 Special-Purpose Address Registries, every entry (nested ones included),
# and multicast.
SPECIAL_PURPOSE = [
    *("0.0.0.0/8", "0.0.0.0/32", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16"),
    *("172.16.0.0/12", "192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.9/32", "192.0.0.10/32"),
    *("192.0.0.170/32", "192.0.0.171/32", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24"),
    *("192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24"),
    *("203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32", "224.0.0.0/4"),
    *("::1/128", "::/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64"),
    *("100:0:0:1::/64", "2001::/23", "2001::/32", "2001:1::1/128", "2001:1::2/128", "2001:1::3/128"),
    *("2001:2::/48", "2001:3::/32", "2001:4:112::/48", "2001:10::/28", "2001:20::/28", "2001:30::/28"),
    *("2001:db8::/32", "2002::/16", "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fc00::/7"),
    *("fe80::/10", "ff00::/8"),
]


def ip_blocks(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [peer["ipBlock"] for rule in policy["spec"]["egress"] for peer in rule["to"] if "ipBlock" in peer]


def reaches(blocks: list[dict[str, Any]], cidr: str) -> bool:
    """Whether any address of `cidr` is let through by the policy's ipBlocks."""
    wanted = ipaddress.ip_network(cidr)
    for block in blocks:
        opened = ipaddress.ip_network(block["cidr"])
        if opened.version != wanted.version or not opened.overlaps(wanted):
            continue
        cut = [ipaddress.ip_network(e) for e in block.get("except", [])]
        if not any(wanted.subnet_of(c) for c in cut if c.version == wanted.version):  # type: ignore[arg-type]
            return True
    return False


def policy_of(objects: list[dict[str, Any]], subagent_name: str) -> dict[str, Any]:
    return next(
        o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith(subagent_name)
    )


@pytest.mark.parametrize("special", SPECIAL_PURPOSE)
def test_internet_never_reaches_a_special_purpose_range(special: str) -> None:
    objects = desired_children(REF, spec_with(subagents=[subagent("web", "internet")]), SETTINGS, 0)
    blocks = ip_blocks(policy_of(objects, "sbx-web"))
    assert not reaches(blocks, special)
    for public in ("151.101.0.223/32", "8.8.8.8/32", "2a04:4e42::223/128", "2606:4700::1111/128"):
        assert reaches(blocks, public)


@pytest.mark.parametrize(
    "entry",
    [
        "0.0.0.0/0",
        "10.0.0.0/8",
        "100.64.3.4",
        "169.254.169.254",
        "8.0.0.0/6",
        "::/0",
        "fd00::/8",
        "2001:db8::1",
    ],
)
def test_an_allowlist_wider_than_internet_is_refused_with_nothing_made(entry: str) -> None:
    spec = spec_with(subagents=[subagent("fetch", "allowlist", ["151.101.0.0/16", entry])])
    [why] = admission.refusals(spec, SETTINGS)
    assert (
        why.startswith("spec.subagents[fetch].allowlist: ") and "wider than networkProfile 'internet'" in why
    )
    # Should it reach the policy anyway, the entry is left out, never opened.
    policy = policy_of(desired_children(REF, spec, SETTINGS, 0), "sbx-fetch")
    assert ip_blocks(policy) == [{"cidr": "151.101.0.0/16"}]


def test_a_host_name_in_an_allowlist_is_refused_not_dropped() -> None:
    spec = spec_with(subagents=[subagent("fetch", "allowlist", ["pypi.org", "151.101.0.0/16"])])
    [why] = admission.refusals(spec, SETTINGS)
    assert "'pypi.org' is not an address or range" in why and "cannot name a host" in why
    assert (
        admission.refusals(spec_with(subagents=[subagent("f", "allowlist", ["151.101.0.0/16"])]), SETTINGS)
        == []
    )


def test_images_are_names_among_those_the_operator_allows() -> None:
    named = spec_with(
        executor={"type": "scripted", "plan": "/p.yaml", "image": "gpu"},
        subagents=[{**subagent("a"), "image": "python-3-12"}, subagent("b")],
    )
    assert admission.refusals(named, SETTINGS) == []
    objects = desired_children(REF, named, SETTINGS, 0)
    images = {
        o["metadata"]["name"]: o["spec"]["containers"][0]["image"] for o in objects if o["kind"] == "Pod"
    }
    assert images == {
        "parser-fix-sbx-a-0": "registry.example/sandbox-python:3.12",
        "parser-fix-sbx-b-0": SETTINGS.sandbox_image,
        "parser-fix-harness-0": "registry.example/belay-harness-gpu:1.0",
    }
    foreign = spec_with(
        executor={"type": "scripted", "plan": "/p.yaml", "image": "mine"},
        subagents=[{**subagent("a"), "image": "gpu"}],  # a harness image's name is no sandbox image
    )
    assert admission.refusals(foreign, SETTINGS) == [
        "spec.executor.image: 'mine' is not a harness image this operator allows (allowed: gpu)",
        "spec.subagents[a].image: 'gpu' is not a sandbox image this operator allows (allowed: python-3-12)",
    ]


def test_a_sessions_own_stores_come_whole_with_their_secret_and_never_from_a_disk() -> None:
    own = {
        "events": "etcd://etcd.team-a:2379/belay",
        "artifacts": "s3://team-a",
        "secretRef": "team-a-stores",
    }
    assert admission.refusals(spec_with(stores=own), SETTINGS) == []
    for partial in (
        {"events": own["events"]},
        {"artifacts": own["artifacts"], "secretRef": "x"},
        {"secretRef": "x"},
    ):
        [why] = admission.refusals(spec_with(stores=partial), SETTINGS)
        assert why == admission.OWN_STORES_MESSAGE
    on_disk = {**own, "events": "sqlite:///var/lib/belay/events.db"}
    [why] = admission.refusals(spec_with(stores=on_disk), SETTINGS)
    assert "would name the operator's own disk" in why


def test_a_sessions_own_stores_are_opened_with_its_secret_and_nothing_of_the_operators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable, value in {
        "AWS_ACCESS_KEY_ID": "fleet-key",
        "AWS_SECRET_ACCESS_KEY": "fleet-secret",
        "AWS_ENDPOINT_URL": "http://fleet-s3:9000",
        "BELAY_RECORD_KEY": "f" * 40,
    }.items():
        monkeypatch.setenv(variable, value)
    spec = spec_with(stores={"events": "etcd://e:2379/belay", "artifacts": "s3://team-a", "secretRef": "s"})
    events, artifacts = admission.own_store_specs(
        spec, {"AWS_ACCESS_KEY_ID": "team-key", "AWS_SECRET_ACCESS_KEY": "team-secret"}
    )
    assert "fleet" not in json.dumps([events, artifacts])
    assert (artifacts["access_key"], artifacts["secret_key"]) == ("team-key", "team-secret")
    assert artifacts["endpoint_url"] == "https://s3.us-east-1.amazonaws.com"
    assert events["record_key"] == ""  # none in the Secret: none at all, not the operator's
    from belay.stores.integrity import record_key_for

    assert record_key_for(events) is None
    with pytest.raises(ValueError, match="has no AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY"):
        admission.own_store_specs(spec, {})


def test_sandbox_pods_run_under_the_runtime_class_nodes_and_user_namespace_the_chart_sets() -> None:
    settings = SETTINGS.model_copy(
        update={
            "sandbox_runtime_class": "gvisor",
            "sandbox_runtime_classes": {"internet": "kata"},
            "allowed_runtime_classes": ["runc-tight"],
            "sandbox_node_selector": {"belay.dev/sandboxes": "true"},
            "sandbox_tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            "sandbox_user_namespace": True,
        }
    )
    subagents = [
        subagent("offline"),
        subagent("web", "internet"),
        {**subagent("chosen"), "runtimeClassName": "runc-tight"},
    ]
    spec = spec_with(subagents=subagents)
    assert admission.refusals(spec, settings) == []
    runtime = {}
    for sub in spec.subagents:
        pod = sandbox_pod(REF, sub, settings, 0)["spec"]
        runtime[sub.name] = pod["runtimeClassName"]
        assert pod["nodeSelector"] == {"belay.dev/sandboxes": "true"}
        assert pod["tolerations"] == [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]
        assert pod["hostUsers"] is False
        # The pool's pod of the same template is placed the same way.
        pooled = pool_pod("team-a", template_of(sub, settings), settings, "p", "0" * 64)["spec"]
        assert {k: pooled[k] for k in ("runtimeClassName", "nodeSelector", "tolerations", "hostUsers")} == {
            k: pod[k] for k in ("runtimeClassName", "nodeSelector", "tolerations", "hostUsers")
        }
    assert runtime == {"offline": "gvisor", "web": "kata", "chosen": "runc-tight"}
    harness = harness_pod(REF, spec, settings, 0)["spec"]
    assert not {"runtimeClassName", "nodeSelector", "tolerations", "hostUsers"} & set(harness)
    # A RuntimeClass the chart does not allow is refused: a tenant never picks a weaker one.
    weaker = spec_with(subagents=[{**subagent("a"), "runtimeClassName": "runc"}])
    [why] = admission.refusals(weaker, settings)
    assert why.startswith(
        "spec.subagents[a].runtimeClassName: 'runc' is not a RuntimeClass this operator allows"
    )
    # Without settings, a sandbox pod is placed as before: no field the cluster may not support.
    plain = sandbox_pod(REF, spec.subagents[0], OperatorSettings(), 0)["spec"]
    assert not {"runtimeClassName", "nodeSelector", "tolerations", "hostUsers"} & set(plain)
    assert SandboxTemplate("i", "none").runtime_class is None
