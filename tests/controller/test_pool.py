"""The sandbox pool's decisions (belay.controller.pool): what a pool pod is, what keeps a pool at
its size, which pods a claim takes and what the claim makes of them."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from belay.api.resources import SandboxResources
from belay.controller import names
from belay.controller.desired import (
    ENV_SANDBOX_CLAIM_DIR,
    HARNESS_CLAIMS_MOUNT,
    default_deny_policy,
    desired_children,
    harness_pod,
    sandbox_pod,
    sandbox_policy,
    sandbox_service,
)
from belay.controller.pool import (
    PoolPod,
    SandboxTemplate,
    claim_choice,
    claim_key_secret,
    claim_patch,
    claimed_sandboxes,
    current_sandboxes,
    pool_changes,
    pool_pod,
    pool_policy,
    running_session,
    subagents_to_claim,
    template_id,
    template_of,
    wanted_templates,
)
from belay.controller.settings import OperatorSettings
from tests.controller.sessions import REF, spec_with, subagent

SETTINGS = OperatorSettings(sandbox_pool_size=2)
DIGEST = "ab" * 32
NONE = SandboxTemplate("belay-harness:latest", "none")


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_a_pool_pod_is_the_subagents_sandbox_pod_but_for_its_token_its_name_and_its_owner() -> None:
    spec = spec_with()
    researcher = spec.subagents[0]
    made = sandbox_pod(REF, researcher, SETTINGS, 3)
    pooled = pool_pod("team-a", template_of(researcher, SETTINGS), SETTINGS, "belay-pool-x-1", DIGEST)
    assert "ownerReferences" not in pooled["metadata"]
    assert pooled["metadata"]["labels"] == names.pool_selector(template_id(NONE, SETTINGS))
    (container,) = pooled["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--claim-key-sha256") + 1] == DIGEST
    assert "--token-file" not in command
    # No Secret of any kind: the pool pod holds no credential before its claim.
    assert all("secret" not in v and "projected" not in v for v in pooled["spec"]["volumes"])
    # Everything else is the pod the subagent would get.
    (own,) = made["spec"]["containers"]
    at = own["command"].index("--token-file")
    assert command[:at] + command[at + 2 :] == own["command"][:at] + own["command"][at + 2 :]
    assert {k: v for k, v in container.items() if k not in ("command", "volumeMounts")} == {
        k: v for k, v in own.items() if k not in ("command", "volumeMounts")
    }
    assert [m for m in own["volumeMounts"] if m["name"] != "sandbox-token"] == container["volumeMounts"]
    assert {k: v for k, v in pooled["spec"].items() if k not in ("volumes", "containers")} == {
        k: v for k, v in made["spec"].items() if k not in ("volumes", "containers")
    }


def test_a_template_is_image_profile_and_resources_and_the_settings_that_shape_the_pod() -> None:
    assert template_id(NONE, SETTINGS) == template_id(
        SandboxTemplate("belay-harness:latest", "none"), SETTINGS
    )
    others = [
        SandboxTemplate("other:1", "none"),
        SandboxTemplate("belay-harness:latest", "internet"),
        SandboxTemplate("belay-harness:latest", "none", SandboxResources(memory_mib=512)),
    ]
    ids = {template_id(t, SETTINGS) for t in [NONE, *others]}
    assert len(ids) == 4
    reshaped = SETTINGS.model_copy(update={"stop_drain_s": 5})
    assert template_id(NONE, reshaped) != template_id(NONE, SETTINGS)
    # The pool's size does not shape a pod.
    assert template_id(NONE, SETTINGS.model_copy(update={"sandbox_pool_size": 7})) == template_id(
        NONE, SETTINGS
    )
    # An allowlist is not part of the template: it is in the NetworkPolicy the claim puts on.
    allowlisted = spec_with(
        subagents=[subagent("a", "allowlist", ["10.1.2.3/32"]), subagent("b", "allowlist")]
    )
    first, second = (template_of(s, SETTINGS) for s in allowlisted.subagents)
    assert template_id(first, SETTINGS) == template_id(second, SETTINGS)


def test_each_namespace_keeps_the_templates_of_its_sessions_and_none_without_a_size() -> None:
    one = spec_with()
    other = spec_with(subagents=[subagent("web", "internet")])
    wanted = wanted_templates([("team-a", one), ("team-a", other), ("team-b", one)], SETTINGS)
    assert sorted(wanted) == ["team-a", "team-b"]
    assert sorted(t.network_profile for t in wanted["team-a"].values()) == ["internet", "none"]
    assert list(wanted["team-b"].values()) == [NONE]  # both example subagents share it
    assert wanted_templates([("team-a", one)], SETTINGS.model_copy(update={"sandbox_pool_size": 0})) == {}


def test_only_running_sessions_keep_their_pools() -> None:
    assert running_session({"metadata": {}, "status": {"phase": "Running"}})
    assert running_session({"metadata": {}})  # not reconciled yet
    assert running_session({"metadata": {}, "status": {"phase": "WaitingOnUser"}})
    assert not running_session({"metadata": {}, "status": {"phase": "Succeeded"}})
    assert not running_session({"metadata": {}, "status": {"phase": "Failed"}})
    assert not running_session({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})


def pool_pod_view(name: str, template: str, phase: str = "Running", **more: Any) -> PoolPod:
    return PoolPod(name=name, namespace="team-a", template=template, phase=phase, keyed=True, **more)


def test_a_pool_is_kept_at_its_size_and_holds_only_live_pods_it_can_vouch_for() -> None:
    tid = template_id(NONE, SETTINGS)
    wanted = {"team-a": {tid: NONE}}
    assert pool_changes(wanted, [], 2).create == [("team-a", NONE), ("team-a", NONE)]

    pods = [
        pool_pod_view("ready", tid, ready=True),
        pool_pod_view("ran", tid, phase="Succeeded"),  # its server ended: never claimed again
        pool_pod_view("failed", tid, phase="Failed"),
        pool_pod_view("going", tid, deleting=True),  # being deleted: neither counted nor deleted again
        PoolPod("unvouched", "team-a", tid, "Running", keyed=False),  # made before a restart
        pool_pod_view("old-shape", "0123456789"),
        pool_pod_view("starting", tid, phase="Pending"),
        pool_pod_view("extra", tid),
    ]
    changes = pool_changes(wanted, pods, 2)
    # Past the size, a pod still starting goes before a running one.
    assert sorted(p.name for p in changes.delete) == ["failed", "old-shape", "ran", "starting", "unvouched"]
    assert changes.create == []  # "ready" and "extra" make two
    # A pool no session wants any more is emptied; a size of 0 empties every pool.
    assert sorted(p.name for p in pool_changes({}, pods, 2).delete) == sorted(
        p.name for p in pods if p.name != "going"
    )
    assert pool_changes(wanted, pods, 0).create == []
    assert len(pool_changes(wanted, pods, 0).delete) == 7


def test_a_claim_takes_distinct_running_pods_of_each_subagents_template_ready_ones_first() -> None:
    none, web = (
        template_id(NONE, SETTINGS),
        template_id(SandboxTemplate("belay-harness:latest", "internet"), SETTINGS),
    )
    pods = [
        pool_pod_view("a-running", none),
        pool_pod_view("b-ready", none, ready=True),
        pool_pod_view("c-pending", none, phase="Pending"),
        PoolPod("d-unvouched", "team-a", none, "Running", keyed=False),
        pool_pod_view("e-going", none, deleting=True),
        pool_pod_view("f-web", web),
    ]
    chosen = claim_choice({"researcher": none, "implementer": none, "tester": none}, pods)
    assert {s: p.name for s, p in chosen.items()} == {"implementer": "b-ready", "researcher": "a-running"}
    assert {s: p.name for s, p in claim_choice({"browser": web}, pods).items()} == {"browser": "f-web"}
    assert claim_choice({"other": "0000000000"}, pods) == {}


def pool_pod_object(name: str = "belay-pool-x-1") -> dict[str, Any]:
    pod = pool_pod("team-a", NONE, SETTINGS, name, DIGEST)
    pod["metadata"]["resourceVersion"] = "7"
    return pod


def test_a_claim_puts_the_pod_under_its_sessions_service_and_policies_and_only_from_the_pool() -> None:
    spec = spec_with()
    researcher = spec.subagents[0]
    pod = pool_pod_object()
    pool_only = pool_policy("team-a")["spec"]["podSelector"]["matchLabels"]
    assert matches(pool_only, pod["metadata"]["labels"])

    claimed = jsonpatch.apply_patch(pod, claim_patch(REF, "researcher", 4))
    labels = claimed["metadata"]["labels"]
    assert claimed["metadata"]["ownerReferences"] == [REF.owner_reference()]
    # The pool's policy lets go of it in the same write that puts it under the session's.
    assert not matches(pool_only, labels)
    for policy in (default_deny_policy(REF), sandbox_policy(REF, researcher, SETTINGS)):
        assert matches(policy["spec"]["podSelector"]["matchLabels"], labels)
    other_subagent = sandbox_policy(REF, spec.subagents[1], SETTINGS)
    assert not matches(other_subagent["spec"]["podSelector"]["matchLabels"], labels)
    assert matches(sandbox_service(REF, researcher, SETTINGS, 4)["spec"]["selector"], labels)
    assert not matches(sandbox_service(REF, researcher, SETTINGS, 5)["spec"]["selector"], labels)
    # The spec is untouched: the container the pool started is the one that serves.
    assert claimed["spec"] == pod["spec"]

    # A pod no longer in the pool (claimed by another session's pass) is not claimed again.
    other = copy.deepcopy(REF.__dict__)
    other.update(name="other", uid="0b7c6a52-0000-4000-8000-000000000002")
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(claimed, claim_patch(type(REF)(**other), "researcher", 0))


def test_the_claim_key_secret_goes_with_its_pool_pod() -> None:
    secret = claim_key_secret("team-a", "belay-pool-x-1", "uid-1", "k" * 43)
    assert secret["metadata"]["name"] == names.claim_key_secret_name("belay-pool-x-1")
    assert secret["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "belay-pool-x-1",
        "uid": "uid-1",
    }


def test_an_attempt_claims_only_before_its_harness_pod_exists_and_only_what_has_no_pod() -> None:
    spec = spec_with()
    tid = template_id(NONE, SETTINGS)
    none: dict[str, int] = {"researcher": 0, "implementer": 0}
    assert subagents_to_claim(REF, spec, SETTINGS, 3, none, [], {}) == {"implementer": tid, "researcher": tid}
    made = [names.sandbox_pod_name("parser-fix", "researcher", 3)]
    assert subagents_to_claim(REF, spec, SETTINGS, 3, none, made, {}) == {"implementer": tid}
    assert subagents_to_claim(REF, spec, SETTINGS, 3, none, [], {"researcher": "belay-pool-x-1"}) == {
        "implementer": tid
    }
    assert subagents_to_claim(REF, spec, SETTINGS, 3, {**none, "researcher": 1}, [], {}) == {
        "implementer": tid
    }
    harness = [names.harness_pod_name("parser-fix", 3)]
    assert subagents_to_claim(REF, spec, SETTINGS, 3, none, harness, {}) == {}
    assert subagents_to_claim(REF, spec, SETTINGS, None, none, [], {}) == {}
    no_pool = SETTINGS.model_copy(update={"sandbox_pool_size": 0})
    assert subagents_to_claim(REF, spec, no_pool, 3, none, [], {}) == {}


def test_a_claimed_pod_is_its_subagents_sandbox_until_it_is_replaced() -> None:
    claimed_pod = jsonpatch.apply_patch(pool_pod_object("belay-pool-x-1"), claim_patch(REF, "researcher", 4))
    older = jsonpatch.apply_patch(pool_pod_object("belay-pool-x-0"), claim_patch(REF, "implementer", 3))
    made = sandbox_pod(REF, spec_with().subagents[1], SETTINGS, 4)
    pods = [(p["metadata"]["name"], p["metadata"]["labels"]) for p in (claimed_pod, older, made)]
    none = {"researcher": 0, "implementer": 0}
    assert claimed_sandboxes(pods, 4, none) == {"researcher": "belay-pool-x-1"}
    assert claimed_sandboxes(pods, 4, {**none, "researcher": 1}) == {}
    assert claimed_sandboxes(pods, None, none) == {}
    assert current_sandboxes(
        "parser-fix", 4, {**none, "implementer": 2}, {"researcher": "belay-pool-x-1"}
    ) == {
        "researcher": "belay-pool-x-1",
        "implementer": "parser-fix-sbx-implementer-4-r2",
    }


def test_a_harness_that_claimed_gets_each_claim_key_and_no_pod_is_made_for_a_claimed_sandbox() -> None:
    spec = spec_with()
    claims = {"researcher": "belay-pool-x-1"}
    objects = desired_children(REF, spec, SETTINGS, 4, claimed=claims)
    pods = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    assert sorted(pods) == ["parser-fix-harness-4", "parser-fix-sbx-implementer-4"]
    harness = pods["parser-fix-harness-4"]
    (container,) = harness["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[ENV_SANDBOX_CLAIM_DIR] == HARNESS_CLAIMS_MOUNT
    volume = next(v for v in harness["spec"]["volumes"] if v["name"] == "sandbox-claims")
    assert volume["projected"]["sources"] == [
        {"secret": {"name": "belay-pool-x-1-claim", "items": [{"key": "key", "path": "researcher"}]}}
    ]
    assert {"name": "sandbox-claims", "mountPath": HARNESS_CLAIMS_MOUNT, "readOnly": True} in container[
        "volumeMounts"
    ]
    # Without a claim, no claim directory at all.
    plain = harness_pod(REF, spec, SETTINGS, 4)
    assert ENV_SANDBOX_CLAIM_DIR not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    assert "sandbox-claims" not in {v["name"] for v in plain["spec"]["volumes"]}
