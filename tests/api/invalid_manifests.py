"""The invalid AgentSession manifests, each with the message it must be refused with.

`BOTH` runs through `belay run` (tests/cli/test_invalid_manifests.py) and through the real
apiserver (tests/api/test_invalid_manifests.py): each side must refuse it with `message` in its
error, and write nothing. `APISERVER_ONLY` and `CLI_ONLY` hold what only one side can see, each with
the reason.

Every manifest is the parser-fix example with one thing wrong. Its plan and input directory are
given as absolute paths, so the manifest means the same wherever the test writes it (in a cluster
they would be paths inside the harness image).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from belay.api.agentsession import (
    ALLOWLIST_MESSAGE,
    APPROVAL_NAMES_MESSAGE,
    APPROVAL_SUBAGENT_MESSAGE,
    APPROVAL_TOOL_MESSAGE,
    ARTIFACTS_URL_MESSAGE,
    BASE_URL_MESSAGE,
    CREDENTIALS_SECRET_MESSAGE,
    DECLARED_MESSAGE,
    DELIVERABLE_MESSAGE,
    EVENTS_URL_MESSAGE,
    FORK_IMMUTABLE_MESSAGE,
    IMAGE_NAME_MESSAGE,
    INPUT_GIT_HOST_PATH_MESSAGE,
    INPUT_ONE_SOURCE_MESSAGE,
    INPUT_SOURCE_MESSAGE,
    INPUT_TARGET_MESSAGE,
    INPUTS_DECLARED_MESSAGE,
    MANAGED_BASE_URL_MESSAGE,
    MAX_ATTEMPTS,
    MAX_MODEL_CALLS,
    MAX_OUTPUT_TOKENS,
    MAX_OUTPUT_TOKENS_MESSAGE,
    MODEL_ONLY_PROVIDERS_MESSAGE,
    MODEL_REQUIRED_MESSAGE,
    PART_NAME_MESSAGE,
    PLAN_ONLY_SCRIPTED_MESSAGE,
    PLAN_REQUIRED_MESSAGE,
    RUNTIME_CLASS_MESSAGE,
    SESSION_NAME_MESSAGE,
    UNIQUE_SUBAGENTS_MESSAGE,
)
from belay.api.artifact_input import SHA256_MESSAGE, SOURCE_DELIVERABLE_MESSAGE, SOURCE_SESSION_MESSAGE
from belay.api.git_input import (
    GIT_CREDENTIALS_SCHEME_MESSAGE,
    GIT_REVISION_MESSAGE,
    GIT_URL_CREDENTIALS_MESSAGE,
    GIT_URL_MESSAGE,
)
from belay.journal.tools import MAX_CAPTURE_BYTES
from belay.sandbox.protocol import MAX_COMMAND_BYTES
from tests.api.kubehelpers import REPO_ROOT

EXAMPLE_DIR = REPO_ROOT / "examples" / "parser-fix"
PLAN = EXAMPLE_DIR / "plan.yaml"
HASH = "c188ef05cebdb6363660643c540c6ecabe0e3da64ccb272b018fbc5e7c3a7771"


def valid_manifest(name: str = "valid") -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLE_DIR / "session.yaml").read_text())
    manifest["metadata"] = {"name": name}
    manifest["spec"]["executor"]["plan"] = str(PLAN)
    for subagent in manifest["spec"]["subagents"]:
        for item in subagent["inputs"]:
            item["source"], item["hostPath"] = str(EXAMPLE_DIR / item["source"]), True
    return manifest


DELETE = object()


def changed(name: str, **changes: Any) -> dict[str, Any]:
    """The valid manifest named `name`, with dotted paths (`spec.subagents.0.name`) set or deleted."""
    manifest = valid_manifest(name)
    for dotted, value in changes.items():
        target: Any = manifest
        *parents, leaf = dotted.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        key: Any = int(leaf) if leaf.isdigit() else leaf
        if value is DELETE:
            del target[key]
        else:
            target[key] = copy.deepcopy(value)
    return manifest


@dataclass(frozen=True)
class Case:
    name: str
    manifest: dict[str, Any]
    message: str  # found in the refusal on every side that runs the case
    # For an update: the manifest stored first; the case's manifest then replaces it.
    earlier: dict[str, Any] | None = None
    reason: str = ""  # why only one side runs it
    # For `belay run`: files written beside the manifest (relative path -> text), and symlinks
    # (relative path -> what they point at).
    files: dict[str, str] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)


_SUBAGENT = valid_manifest()["spec"]["subagents"][1]
_GIT = {"url": "https://git.example.com/project.git", "revision": "0123456789abcdef0123456789abcdef01234567"}


def _git_input(name: str, hostPath: bool | None = None, **git: str) -> dict[str, Any]:
    """The valid manifest with its first input taken from a repository instead, `git` changed."""
    item: dict[str, Any] = {"git": {**_GIT, **git}, "target": "repo"}
    if hostPath is not None:
        item["hostPath"] = hostPath
    return changed(name, **{"spec.subagents.0.inputs.0": item})


_ARTIFACT = {"session": "producer", "deliverable": "report.md"}


def _artifact_input(name: str, hostPath: bool | None = None, **artifact: str) -> dict[str, Any]:
    """The valid manifest with its first input taken from another session's deliverable instead."""
    item: dict[str, Any] = {"artifact": {**_ARTIFACT, **artifact}, "target": "repo"}
    if hostPath is not None:
        item["hostPath"] = hostPath
    return changed(name, **{"spec.subagents.0.inputs.0": item})


_LONG_NAME = "a" * 64

BOTH: list[Case] = [
    # metadata
    Case("session-name-with-dot", changed("bad.name"), SESSION_NAME_MESSAGE),
    Case("session-name-64-characters", changed(_LONG_NAME), SESSION_NAME_MESSAGE),
    # request
    Case(
        "goal-missing",
        changed("goal-missing", **{"spec.request.goal": DELETE}),
        "spec.request.goal: Required value",
    ),
    Case(
        "goal-empty",
        changed("goal-empty", **{"spec.request.goal": ""}),
        'spec.request.goal: Invalid value: "": spec.request.goal in body should be at least 1 chars long',
    ),
    Case(
        "goal-over-64-kib",
        changed("goal-long", **{"spec.request.goal": "x" * (64 * 1024 + 1)}),
        "spec.request.goal: Too long: may not be more than 8192",
    ),
    Case(
        "goal-not-a-string",
        changed("goal-list", **{"spec.request.goal": ["fix", "it"]}),
        'spec.request.goal: Invalid value: "array": spec.request.goal in body must be of type string: '
        '"array"',
    ),
    Case(
        "nine-request-parts",
        changed("parts-many", **{"spec.request.parts": {f"part{i}": "x" for i in range(9)}}),
        "spec.request.parts: Too many: 9: must have at most 8 items",
    ),
    Case(
        "request-part-name-with-space",
        changed("part-name", **{"spec.request.parts": {"the repository": "x"}}),
        PART_NAME_MESSAGE,
    ),
    Case(
        "request-part-too-long",
        changed("part-long", **{"spec.request.parts": {"repository": "x" * 257}}),
        "spec.request.parts.repository: Too long: may not be more than 256",
    ),
    # executor
    Case(
        "executor-type-managed",
        changed("exec-managed", **{"spec.executor": {"type": "managed"}}),
        'spec.executor.type: Unsupported value: "managed"',
    ),
    Case(
        "executor-type-not-implemented",
        changed("exec-managed", **{"spec.executor": {"type": "managed", "model": "gpt-5"}}),
        'spec.executor.type: Unsupported value: "managed"',
    ),
    Case(
        "base-url-for-managed",
        changed(
            "managed-base-url",
            **{"spec.executor": {"type": "openai-agents", "model": "m", "baseURL": "http://127.0.0.1:1/v1"}},
        ),
        MANAGED_BASE_URL_MESSAGE,
    ),
    Case(
        "credentials-secret-for-scripted",
        changed("scripted-secret", **{"spec.executor.credentialsSecret": "provider-keys"}),
        CREDENTIALS_SECRET_MESSAGE,
    ),
    Case(
        "scripted-without-plan", changed("no-plan", **{"spec.executor.plan": DELETE}), PLAN_REQUIRED_MESSAGE
    ),
    Case(
        "scripted-with-empty-plan",
        changed("empty-plan", **{"spec.executor.plan": ""}),
        "spec.executor.plan in body should be at least 1 chars long",
    ),
    Case(
        "openai-without-model",
        changed("no-model", **{"spec.executor": {"type": "openai"}}),
        MODEL_REQUIRED_MESSAGE,
    ),
    Case(
        "plan-for-anthropic",
        changed(
            "plan-anthropic", **{"spec.executor": {"type": "anthropic", "model": "m", "plan": "plan.yaml"}}
        ),
        PLAN_ONLY_SCRIPTED_MESSAGE,
    ),
    Case(
        "model-for-scripted",
        changed("model-scripted", **{"spec.executor.model": "gpt-5"}),
        MODEL_ONLY_PROVIDERS_MESSAGE,
    ),
    Case(
        "max-output-tokens-for-scripted",
        changed("tokens-scripted", **{"spec.executor.maxOutputTokens": 512}),
        MAX_OUTPUT_TOKENS_MESSAGE,
    ),
    Case(
        "max-output-tokens-for-managed",
        changed(
            "tokens-managed",
            **{"spec.executor": {"type": "openai-agents", "model": "m", "maxOutputTokens": 512}},
        ),
        MAX_OUTPUT_TOKENS_MESSAGE,
    ),
    Case(
        "max-output-tokens-zero",
        changed("tokens-zero", **{"spec.executor": {"type": "openai", "model": "m", "maxOutputTokens": 0}}),
        "spec.executor.maxOutputTokens: Invalid value: 0: spec.executor.maxOutputTokens in body should be "
        "greater than or equal to 1",
    ),
    Case(
        "max-output-tokens-above-the-bound",
        changed(
            "tokens-bound",
            **{
                "spec.executor": {"type": "anthropic", "model": "m", "maxOutputTokens": MAX_OUTPUT_TOKENS + 1}
            },
        ),
        f"spec.executor.maxOutputTokens: Invalid value: {MAX_OUTPUT_TOKENS + 1}: "
        f"spec.executor.maxOutputTokens in body should be less than or equal to {MAX_OUTPUT_TOKENS}",
    ),
    Case(
        "base-url-not-http",
        changed("base-url", **{"spec.executor": {"type": "openai", "model": "m", "baseURL": "ftp://models"}}),
        BASE_URL_MESSAGE,
    ),
    # subagents
    Case(
        "no-subagents",
        changed("no-subagents", **{"spec.subagents": []}),
        "spec.subagents: Invalid value: 0: spec.subagents in body should have at least 1 items",
    ),
    Case(
        "thirty-three-subagents",
        changed(
            "many-subagents",
            **{"spec.subagents": [{"name": f"s{i}"} for i in range(33)], "spec.approvalRequired": []},
        ),
        "spec.subagents: Too many: 33: must have at most 32 items",
    ),
    Case(
        "duplicate-subagents",
        changed("dup-subagents", **{"spec.subagents": [_SUBAGENT, _SUBAGENT]}),
        UNIQUE_SUBAGENTS_MESSAGE,
    ),
    Case(
        "subagent-name-not-a-label",
        changed("sub-label", **{"spec.subagents.0.name": "Research_Team"}),
        'spec.subagents[0].name: Invalid value: "Research_Team": spec.subagents[0].name in body should '
        "match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    ),
    Case(
        "subagent-name-41-characters",
        changed("sub-long", **{"spec.subagents.0.name": "r" * 41}),
        "spec.subagents[0].name: Too long: may not be more than 40",
    ),
    Case(
        "unknown-network-profile",
        changed("profile", **{"spec.subagents.0.networkProfile": "open"}),
        'spec.subagents[0].networkProfile: Unsupported value: "open"',
    ),
    Case(
        "allowlist-without-allowlist-profile",
        changed("allowlist", **{"spec.subagents.0.allowlist": ["pypi.org"]}),
        ALLOWLIST_MESSAGE,
    ),
    Case(
        "role-over-1024-characters",
        changed("role", **{"spec.subagents.0.role": "r" * 1025}),
        "spec.subagents[0].role: Too long: may not be more than 1024",
    ),
    Case(
        "deliverable-climbs-out",
        changed("deliv-dotdot", **{"spec.subagents.0.deliverable": "../../../../x"}),
        DELIVERABLE_MESSAGE,
    ),
    Case(
        "deliverable-absolute",
        changed("deliv-abs", **{"spec.subagents.0.deliverable": "/abs/x"}),
        DELIVERABLE_MESSAGE,
    ),
    Case(
        "deliverable-in-a-directory",
        changed("deliv-dir", **{"spec.subagents.0.deliverable": "out/report.md"}),
        DELIVERABLE_MESSAGE,
    ),
    Case(
        "deliverable-hidden-file",
        changed("deliv-hidden", **{"spec.subagents.0.deliverable": ".bashrc"}),
        DELIVERABLE_MESSAGE,
    ),
    Case(
        "input-target-climbs-out",
        changed("target-dotdot", **{"spec.subagents.0.inputs.0.target": "repo/../../etc"}),
        INPUT_TARGET_MESSAGE,
    ),
    Case(
        "input-target-absolute",
        changed("target-abs", **{"spec.subagents.0.inputs.0.target": "/etc"}),
        INPUT_TARGET_MESSAGE,
    ),
    Case(
        "input-without-source",
        changed(
            "no-source",
            **{"spec.subagents.0.inputs.0.source": DELETE, "spec.subagents.0.inputs.0.hostPath": DELETE},
        ),
        INPUT_ONE_SOURCE_MESSAGE,
    ),
    Case(
        "input-with-a-directory-and-a-repository",
        changed("source-and-git", **{"spec.subagents.0.inputs.0.git": _GIT}),
        INPUT_ONE_SOURCE_MESSAGE,
    ),
    Case("git-input-host-path", _git_input("git-host-path", hostPath=True), INPUT_GIT_HOST_PATH_MESSAGE),
    Case(
        "git-url-with-a-password",
        _git_input("git-password", url="https://someone:hunter2@git.example.com/project.git"),
        GIT_URL_CREDENTIALS_MESSAGE,
    ),
    Case(
        "git-url-with-a-token-as-user",
        _git_input("git-token", url="https://ghp_0123456789abcdef@git.example.com/project.git"),
        GIT_URL_CREDENTIALS_MESSAGE,
    ),
    Case("git-url-over-ssh", _git_input("git-ssh", url="ssh://git.example.com/project.git"), GIT_URL_MESSAGE),
    Case("git-url-ext-transport", _git_input("git-ext", url="ext::sh -c touch% /tmp/x"), GIT_URL_MESSAGE),
    Case(
        "git-url-scp-like",
        _git_input("git-scp", url="git@git.example.com:project.git"),
        GIT_URL_MESSAGE,
    ),
    Case("git-revision-a-branch", _git_input("git-branch", revision="main"), GIT_REVISION_MESSAGE),
    Case(
        "git-revision-abbreviated",
        _git_input("git-short", revision=_GIT["revision"][:12]),
        GIT_REVISION_MESSAGE,
    ),
    Case(
        "git-credentials-over-the-git-protocol",
        _git_input("git-creds-git", url="git://git.example.com/project.git", credentialsSecret="git-token"),
        GIT_CREDENTIALS_SCHEME_MESSAGE,
    ),
    Case(
        "git-credentials-secret-of-another-namespace",
        _git_input("git-creds-ns", credentialsSecret="team-b/git-token"),
        "credentialsSecret",
    ),
    Case(
        "input-with-a-directory-and-an-artifact",
        changed("source-and-artifact", **{"spec.subagents.0.inputs.0.artifact": _ARTIFACT}),
        INPUT_ONE_SOURCE_MESSAGE,
    ),
    Case(
        "artifact-input-host-path",
        _artifact_input("artifact-host-path", hostPath=True),
        INPUT_GIT_HOST_PATH_MESSAGE,
    ),
    Case(
        "artifact-input-of-a-session-of-another-namespace",
        _artifact_input("artifact-other-ns", session="team-b/producer"),
        SOURCE_SESSION_MESSAGE,
    ),
    Case(
        "artifact-input-deliverable-a-path",
        _artifact_input("artifact-path", deliverable="../report.md"),
        SOURCE_DELIVERABLE_MESSAGE,
    ),
    Case(
        "artifact-input-sha256-abbreviated",
        _artifact_input("artifact-short-pin", sha256=HASH[:12]),
        SHA256_MESSAGE,
    ),
    Case(
        "input-outside-declared",
        changed("input-undeclared", **{"spec.subagents.1.declared": ["repo/*", "tools/*", "out/*"]}),
        INPUTS_DECLARED_MESSAGE,
    ),
    Case(
        "input-under-a-pattern-with-a-wildcard-inside",
        changed("input-glob", **{"spec.subagents.0.declared": ["re?o/*", "out/*"]}),
        INPUTS_DECLARED_MESSAGE,
    ),
    Case(
        "declared-pattern-climbs-out",
        changed("declared", **{"spec.subagents.0.declared": ["repo/*", "../*"]}),
        DECLARED_MESSAGE,
    ),
    # approvals
    Case(
        "approval-without-operation",
        changed("approval-op", **{"spec.approvals": [{"payloadSha256": HASH}]}),
        APPROVAL_NAMES_MESSAGE,
    ),
    Case(
        "approval-hash-not-sha256",
        changed("approval-hash", **{"spec.approvals": [{"operationId": "op", "payloadSha256": "abc"}]}),
        "spec.approvals[0].payloadSha256 in body should match",
    ),
    Case(
        "expires-at-without-time-zone",
        changed(
            "expires-naive",
            **{"spec.approvals.0.expiresAt": "2030-01-01T00:00:00"},
        ),
        'spec.approvals[0].expiresAt: Invalid value: "2030-01-01T00:00:00": spec.approvals[0].expiresAt in '
        'body must be of type date-time: "2030-01-01T00:00:00"',
    ),
    Case(
        "expires-at-a-number",
        changed("expires-number", **{"spec.approvals.0.expiresAt": 1900000000}),
        'spec.approvals[0].expiresAt: Invalid value: "int64": spec.approvals[0].expiresAt in body must be '
        'of type date-time: "int64"',
    ),
    Case(
        "approval-required-misspelled-tool",
        changed("gate-typo", **{"spec.approvalRequired": ["implementer:publish_deliverble"]}),
        APPROVAL_TOOL_MESSAGE,
    ),
    Case(
        "approval-required-unknown-tool",
        changed("gate-tool", **{"spec.approvalRequired": ["deploy"]}),
        APPROVAL_TOOL_MESSAGE,
    ),
    Case(
        "approval-required-unknown-subagent",
        changed("gate-subagent", **{"spec.approvalRequired": ["reviewer:publish_deliverable"]}),
        APPROVAL_SUBAGENT_MESSAGE,
    ),
    # budgets, recovery, stores, fork, retention
    Case(
        "zero-model-calls",
        changed("budget-zero", **{"spec.budgets.maxModelCalls": 0}),
        "spec.budgets.maxModelCalls: Invalid value: 0: spec.budgets.maxModelCalls in body should be greater "
        "than or equal to 1",
    ),
    Case(
        "model-calls-as-text",
        changed("budget-text", **{"spec.budgets.maxModelCalls": "200"}),
        'spec.budgets.maxModelCalls: Invalid value: "string": spec.budgets.maxModelCalls in body must be of '
        'type integer: "string"',
    ),
    Case(
        "budget-not-enforced",
        changed("budget-steps", **{"spec.budgets.maxWallClockS": 600}),
        'unknown field "spec.budgets.maxWallClockS"',
    ),
    Case(
        "zero-attempts",
        changed("attempts", **{"spec.recovery": {"maxAttempts": 0}}),
        "spec.recovery.maxAttempts: Invalid value: 0: spec.recovery.maxAttempts in body should be greater "
        "than or equal to 1",
    ),
    Case(
        "model-calls-above-the-bound",
        changed("budget-bound", **{"spec.budgets.maxModelCalls": MAX_MODEL_CALLS + 1}),
        f"spec.budgets.maxModelCalls: Invalid value: {MAX_MODEL_CALLS + 1}: spec.budgets.maxModelCalls in "
        f"body should be less than or equal to {MAX_MODEL_CALLS}",
    ),
    Case(
        "attempts-above-the-bound",
        changed("attempts-bound", **{"spec.recovery": {"maxAttempts": MAX_ATTEMPTS + 1}}),
        f"spec.recovery.maxAttempts: Invalid value: {MAX_ATTEMPTS + 1}: spec.recovery.maxAttempts in body "
        f"should be less than or equal to {MAX_ATTEMPTS}",
    ),
    Case(
        "read-file-cap-above-the-bound",
        changed("read-cap", **{"spec.limits": {"readFileBytes": MAX_CAPTURE_BYTES + 1}}),
        f"spec.limits.readFileBytes: Invalid value: {MAX_CAPTURE_BYTES + 1}: spec.limits.readFileBytes in "
        f"body should be less than or equal to {MAX_CAPTURE_BYTES}",
    ),
    Case(
        "output-cap-zero",
        changed("output-cap", **{"spec.limits": {"commandOutputBytes": 0}}),
        "spec.limits.commandOutputBytes: Invalid value: 0: spec.limits.commandOutputBytes in body should "
        "be greater than or equal to 1",
    ),
    Case(
        "input-source-absolute",
        changed(
            "input-absolute",
            **{"spec.subagents.0.inputs.0.source": "/etc/ssh", "spec.subagents.0.inputs.0.hostPath": DELETE},
        ),
        INPUT_SOURCE_MESSAGE,
    ),
    Case(
        "input-source-climbs-out",
        changed(
            "input-climbs",
            **{
                "spec.subagents.0.inputs.0.source": "repo/../../../../etc/ssh",
                "spec.subagents.0.inputs.0.hostPath": False,
            },
        ),
        INPUT_SOURCE_MESSAGE,
    ),
    Case(
        "unknown-field",
        changed("unknown", **{"spec.budget": {"maxModelCalls": 3}}),
        'unknown field "spec.budget"',
    ),
    Case(
        "event-store-unknown-scheme",
        changed("store-events", **{"spec.stores": {"events": "mysql://db/belay"}}),
        EVENTS_URL_MESSAGE,
    ),
    Case(
        "artifact-store-unknown-scheme",
        changed("store-artifacts", **{"spec.stores": {"artifacts": "gs://bucket"}}),
        ARTIFACTS_URL_MESSAGE,
    ),
    Case(
        "harness-image-a-reference",
        changed("harness-image", **{"spec.executor.image": "ghcr.io/someone/harness:latest"}),
        IMAGE_NAME_MESSAGE,
    ),
    Case(
        "sandbox-image-a-reference",
        changed("sandbox-image", **{"spec.subagents.0.image": "python:3.12"}),
        IMAGE_NAME_MESSAGE,
    ),
    Case(
        "runtime-class-not-a-name",
        changed("runtime-class", **{"spec.subagents.0.runtimeClassName": "G Visor"}),
        RUNTIME_CLASS_MESSAGE,
    ),
    Case(
        "secret-ref-not-a-name",
        changed("store-secret", **{"spec.stores": {"secretRef": "My Secret"}}),
        "spec.stores.secretRef in body should match",
    ),
    Case(
        "fork-source-not-a-name",
        changed("fork-name", **{"spec.forkFrom": {"session": "Parser_Fix"}}),
        "spec.forkFrom.session in body should match",
    ),
    Case(
        "unknown-retention",
        changed("retention", **{"spec.retention": {"record": "Keep"}}),
        'spec.retention.record: Unsupported value: "Keep"',
    ),
]

_FORKED = changed("forked", **{"spec.forkFrom": {"session": "parser-fix", "checkpoint": "cp-1"}})
_UPDATE_REASON = (
    "an update of a stored session: `belay run` never changes a stored session's manifest (a different "
    "one under its name is refused whole: CLI case different-manifest-same-name), and has no forkFrom"
)

APISERVER_ONLY: list[Case] = [
    Case(
        "model-calls-of-ten-to-the-thirty-on-the-apiserver",
        changed("budget-huge", **{"spec.budgets.maxModelCalls": 10**30}),
        'spec.budgets.maxModelCalls: Invalid value: "number": spec.budgets.maxModelCalls in body must be of '
        'type integer: "number"',
        reason="beyond int64, which the apiserver's decoder reads as a float: `belay run` names the bound",
    ),
    Case(
        "fork-source-changed",
        changed("forked", **{"spec.forkFrom": {"session": "other", "checkpoint": "cp-1"}}),
        FORK_IMMUTABLE_MESSAGE,
        earlier=_FORKED,
        reason=_UPDATE_REASON,
    ),
    Case(
        "fork-source-removed",
        changed("forked"),
        FORK_IMMUTABLE_MESSAGE,
        earlier=_FORKED,
        reason=_UPDATE_REASON,
    ),
    Case(
        "fork-source-added",
        _FORKED,
        FORK_IMMUTABLE_MESSAGE,
        earlier=changed("forked"),
        reason=_UPDATE_REASON,
    ),
]

_FILES_REASON = "the apiserver cannot see files: in a cluster the plan and inputs are in the harness image"
_RUNTIME_REASON = "the embedded runtime does not do this; the operator does, so the apiserver accepts it"
_ROUTING_REASON = "the apiserver routes by apiVersion and kind: another kind is another resource"
_PLAN = PLAN.read_text()


def _with_plan(name: str) -> dict[str, Any]:
    """A manifest whose plan is the `plan.yaml` the case writes beside it."""
    return changed(name, **{"spec.executor.plan": "plan.yaml"})


def _plan_edit(old: str, new: str) -> str:
    assert old in _PLAN, old
    return _PLAN.replace(old, new, 1)


_HUGE_COMMAND = "echo " + "x" * (128 * 1024)

CLI_ONLY: list[Case] = [
    Case(
        "plan-file-missing",
        changed("plan-missing", **{"spec.executor.plan": "nowhere.yaml"}),
        "cannot read",
        reason=_FILES_REASON,
    ),
    Case(
        "plan-not-yaml",
        _with_plan("plan-yaml"),
        "not valid YAML",
        files={"plan.yaml": "subagents: [unclosed\n"},
        reason=_FILES_REASON,
    ),
    Case(
        "plan-unknown-tool",
        _with_plan("plan-tool"),
        "unknown tool 'rm_rf'",
        files={"plan.yaml": _plan_edit("- tool: read_file", "- tool: rm_rf")},
        reason=_FILES_REASON,
    ),
    Case(
        "plan-command-over-128-kib",
        _with_plan("plan-command"),
        f"the command is above {MAX_COMMAND_BYTES} bytes",
        files={"plan.yaml": _plan_edit("command: python -B -m unittest\n", f"command: {_HUGE_COMMAND}\n")},
        reason=_FILES_REASON,
    ),
    Case(
        "plan-verify-command-over-128-kib",
        _with_plan("plan-verify"),
        f"the verify command is above {MAX_COMMAND_BYTES} bytes",
        files={
            "plan.yaml": _plan_edit("command: cd repo && python -B -m unittest", f"command: {_HUGE_COMMAND}")
        },
        reason=_FILES_REASON,
    ),
    Case(
        "plan-without-steps-for-a-subagent",
        _with_plan("plan-subagent"),
        "the plan has no steps for subagent 'implementer'",
        files={"plan.yaml": _PLAN[: _PLAN.index("  implementer:")]},
        reason=_FILES_REASON,
    ),
    Case(
        "plan-for-an-undeclared-subagent",
        _with_plan("plan-extra"),
        "the plan has steps for 'reviewer', which is not a subagent of the manifest",
        files={"plan.yaml": _PLAN + "  reviewer:\n    steps:\n    - id: look\n      title: Look\n"},
        reason=_FILES_REASON,
    ),
    Case(
        "git-credentials-secret-in-the-embedded-runtime",
        _git_input("git-creds-local", credentialsSecret="git-token"),
        "git.credentialsSecret: the embedded runtime reads no Kubernetes Secret",
        reason="a cluster mounts the Secret into the harness pod; `belay run` reads no Secret",
    ),
    Case(
        "input-directory-missing",
        changed("input-missing", **{"spec.subagents.0.inputs.0.source": "no-such-dir"}),
        "spec.subagents[0].inputs[0].source",
        reason=_FILES_REASON,
    ),
    Case(
        "input-directory-holds-a-symlink",
        changed("input-link", **{"spec.subagents.0.inputs.0.source": "repo"}),
        "contains a symlink",
        files={"repo/confparse/__init__.py": ""},
        symlinks={"repo/confparse/shadow": "/etc/shadow"},
        reason=_FILES_REASON,
    ),
    Case(
        "model-calls-of-ten-to-the-thirty",
        changed("budget-huge", **{"spec.budgets.maxModelCalls": 10**30}),
        "spec.budgets.maxModelCalls: Invalid value: 1000000000000000000000000000000: "
        f"spec.budgets.maxModelCalls in body should be less than or equal to {MAX_MODEL_CALLS}",
        reason="beyond int64: the apiserver refuses it as no integer before it checks the bound "
        "(model-calls-of-ten-to-the-thirty-on-the-apiserver)",
    ),
    Case(
        "input-source-a-link-out-of-the-manifest-directory",
        changed(
            "input-link-out",
            **{"spec.subagents.0.inputs.0.source": "keys", "spec.subagents.0.inputs.0.hostPath": DELETE},
        ),
        "outside the manifest's directory",
        symlinks={"keys": "/etc"},
        reason=_FILES_REASON,
    ),
    Case(
        "fork-on-the-embedded-runtime",
        _FORKED,
        "the embedded runtime does not fork sessions",
        reason=_RUNTIME_REASON,
    ),
    Case(
        "adopt-record-on-the-embedded-runtime",
        changed("adopting", **{"spec.adoptRecord": True}),
        "spec.adoptRecord: the embedded runtime binds no record to an AgentSession's uid",
        reason=_RUNTIME_REASON,
    ),
    Case(
        "store-secret-on-the-embedded-runtime",
        changed(
            "store-secret-ref",
            **{"spec.stores": {"events": "etcd://127.0.0.1:2379/belay", "secretRef": "stores"}},
        ),
        "spec.stores.secretRef: the embedded runtime reads no Kubernetes Secret",
        reason=_RUNTIME_REASON,
    ),
    Case(
        "different-manifest-same-name",
        changed("same-name", **{"spec.budgets.maxModelCalls": 300}),
        "session same-name already exists",
        earlier=changed("same-name"),
        reason="`belay run` of an existing name; on a cluster this is an update, which the apiserver allows",
    ),
    Case(
        "different-plan-same-name",
        _with_plan("same-plan"),
        "with a different plan",
        earlier=changed("same-plan"),
        files={"plan.yaml": _PLAN.replace("Read the parser.", "Read the parser again.")},
        reason=_FILES_REASON,
    ),
    Case(
        "wrong-kind",
        changed("kind", kind="Session"),
        'kind: Unsupported value: "Session"',
        reason=_ROUTING_REASON,
    ),
    Case(
        "wrong-api-version",
        changed("api", apiVersion="belay.dev/v1"),
        'apiVersion: Unsupported value: "belay.dev/v1"',
        reason=_ROUTING_REASON,
    ),
]
