"""The AgentSession custom resource (belay.dev/v1alpha1), as pydantic models.

These models are the single source of truth for the manifest: `belay run` validates a YAML file
against them, and the operator generates its CRD from them. Field names are snake_case in Python
and camelCase on the wire, as Kubernetes expects.

Every rule beyond types, enums and bounds is written twice, side by side: as a CEL rule the
apiserver runs (`x-kubernetes-validations`) and as the pydantic validator `belay run` runs, with
one message constant for both. Types are strict, as the apiserver's are (a quoted number is not a
number), and a pydantic error is described in the apiserver's words (`describe_validation_error`),
so a manifest is refused the same way, with the same message, wherever it is submitted. The shared
table of invalid manifests in `tests/api/invalid_manifests.py` holds both to that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict
from pydantic_core import PydanticCustomError

from belay.api.artifact_input import ArtifactInput
from belay.api.base import ApiModel
from belay.api.bounded_yaml import FileRefused, describe_yaml_error, load_yaml, read_regular_file
from belay.api.git_input import GitInput
from belay.api.manifest_errors import ManifestError, describe_validation_error
from belay.api.resources import SandboxResources
from belay.api.status import AgentSessionStatus
from belay.api.tool_servers import ToolServerSpec, unique_servers
from belay.journal.state.records import ExecutorChangeRecord
from belay.journal.tools import (
    DEFAULT_COMMAND_OUTPUT_BYTES,
    DEFAULT_READ_FILE_BYTES,
    MAX_CAPTURE_BYTES,
    TOOLS,
)

API_VERSION = "belay.dev/v1alpha1"
KIND = "AgentSession"

# RFC 1123 label: the session id becomes part of object names in a cluster.
SESSION_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SESSION_NAME_MESSAGE = "metadata.name must be a DNS label (at most 63 lowercase letters, digits and '-')"
SUBAGENT_NAME_MAX = 40
# Bounds the CEL rules' cost, which the apiserver estimates from maxItems.
SUBAGENTS_MAX = 32

# The request is recorded as one event, and an event payload holds at most 64 KiB
# (`belay.stores.base.MAX_PAYLOAD_BYTES`). These bounds keep it under that even when every
# character takes the most JSON bytes it can (6, a control character escaped as \u00XX); longer
# material belongs in an input directory.
GOAL_MAX_CHARS = 8192
PARTS_MAX = 8
PART_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
PART_NAME_MESSAGE = "request.parts names must be 1 to 63 letters, digits, '-', '_' or '.'"
PART_MAX_CHARS = 256

# A deliverable is downloaded by its name (`belay artifacts get SESSION NAME` writes ./NAME), and
# the briefing prints that command: the name must be one plain file name, safe unquoted in a shell.
PLAIN_FILE_NAME_PATTERN = r"^[A-Za-z0-9_][-A-Za-z0-9._+]*$"
PLAIN_FILE_NAME_MAX = 128
DELIVERABLE_MESSAGE = (
    "deliverable must be a plain file name: letters, digits, '.', '_', '+' and '-', "
    "not starting with '.', no '/'"
)

# A workspace path given in the manifest: relative, never climbing out with `..`.
_CEL_NO_DOTDOT = "!{x}.startsWith('/') && !{x}.matches('(^|/)[.][.](/|$)')"
INPUT_TARGET_MESSAGE = "inputs[].target must be a relative path inside the workspace, without '..'"
# An input is copied into a sandbox, where the agent (and its model provider) reads it: a source
# outside the manifest's own directory (`/etc/ssh`, `../../.aws`) is taken only when the manifest
# says so in as many words.
INPUT_SOURCE_MESSAGE = (
    "inputs[].source must be a relative path inside the manifest's directory, without '..'; "
    "set hostPath: true on the input to copy a directory from elsewhere on the host"
)
INPUT_ONE_SOURCE_MESSAGE = (
    "an input takes exactly one of source (a directory), git (a repository) and artifact "
    "(another session's deliverable)"
)
INPUT_GIT_HOST_PATH_MESSAGE = "inputs[].hostPath applies only to a source directory, not to git or artifact"
DECLARED_MESSAGE = "declared patterns must be relative to the workspace, without '..'"
# Only declared files survive a sandbox's restore: an input outside them would be dropped without
# a word, and what the session makes from it would not apply. So a subagent that declares its
# state declares every input target T as `T/*` (or everything, `*`): a test the apiserver's rule
# below makes the same way, within its cost budget (a prefix test of every input against every
# pattern exceeds it). One that declares nothing keeps nothing across a restore, its inputs with
# the rest, and its verification re-run says so (RecoveryFailed, UndeclaredState).
INPUTS_DECLARED_MESSAGE = (
    "every inputs[].target T must be declared as 'T/*' (or '*'): only declared files survive a "
    "sandbox's restore"
)
_CEL_INPUTS_DECLARED = (
    "!has(self.inputs) || !has(self.declared) || size(self.declared) == 0 || '*' in self.declared || "
    "self.inputs.all(i, (i.target + '/*') in self.declared)"
)


def covers_input(pattern: str, target: str) -> bool:
    """Whether a declared pattern keeps every file an input copies under `target`."""
    return pattern in ("*", f"{target}/*")


ALLOWLIST_MESSAGE = "allowlist applies only to networkProfile 'allowlist'"

# Who decides each subagent's next action. Self-hosted: Belay's own model loop (a scripted plan, or
# a model through the OpenAI Responses or Anthropic Messages API). Managed: a provider's agent
# session (OpenAI Agents API, Claude Managed Agents) whose tools Belay runs in its own sandboxes.
SELF_HOSTED_EXECUTORS = ("scripted", "openai", "anthropic")
MANAGED_EXECUTORS = ("openai-agents", "anthropic-managed")
MODEL_EXECUTORS = ("openai", "anthropic", *MANAGED_EXECUTORS)
# A plan is what `scripted` follows; for a managed executor, what the local stand-in's remote agent
# follows when no provider is configured.
PLAN_EXECUTORS = ("scripted", *MANAGED_EXECUTORS)
PLAN_REQUIRED_MESSAGE = "executor.plan is required when executor.type is 'scripted'"
MODEL_REQUIRED_MESSAGE = (
    "executor.model is required when executor.type is 'openai', 'anthropic', 'openai-agents' or "
    "'anthropic-managed'"
)
PLAN_ONLY_SCRIPTED_MESSAGE = (
    "executor.plan applies only to executor.type 'scripted', 'openai-agents' or 'anthropic-managed'"
)
MODEL_ONLY_PROVIDERS_MESSAGE = "executor.model and executor.baseURL do not apply to executor.type 'scripted'"
MANAGED_BASE_URL_MESSAGE = (
    "executor.baseURL does not apply to managed executors: they read OPENAI_BASE_URL or "
    "ANTHROPIC_BASE_URL (from executor.credentialsSecret in a cluster)"
)
CREDENTIALS_SECRET_MESSAGE = "executor.credentialsSecret does not apply to executor.type 'scripted'"
# The most output tokens one model turn may be given: what Belay asks for (`max_output_tokens`,
# `max_tokens`); only Belay's own model loop sends a request to honour it with.
MAX_OUTPUT_TOKENS = 1_000_000
OUTPUT_TOKENS_EXECUTORS = ("openai", "anthropic")
MAX_OUTPUT_TOKENS_MESSAGE = (
    "executor.maxOutputTokens applies only to executor.type 'openai' or 'anthropic' (Belay's own "
    "model loop sends it); a scripted plan has no output and a managed provider's loop does not take it"
)
# A session names its images among those the operator allows (its settings, set by the chart):
# never an image reference, so whoever may create a session cannot choose what code runs in a pod
# that holds the fleet's credentials.
IMAGE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
IMAGE_NAME_MESSAGE = (
    "image must be the name of an image the operator allows (a DNS label, such as 'python-3-12'), "
    "not an image reference"
)
RUNTIME_CLASS_MESSAGE = "runtimeClassName must be the name of a RuntimeClass (a DNS label)"
BASE_URL_PATTERN = r"^https?://[^/?#\s]+([/?#]\S*)?$"
BASE_URL_MESSAGE = "executor.baseURL must be an http:// or https:// URL"

APPROVAL_NAMES_MESSAGE = "an approval needs operationId or approvalId"
TOOL_NAMES = tuple(sorted(TOOLS))
APPROVAL_TOOL_MESSAGE = (
    "approvalRequired entries must be TOOL or SUBAGENT:TOOL, with TOOL one of: "
    + ", ".join(TOOL_NAMES)
    + ", or SERVER.TOOL of a tool server the subagent declares"
)
# A tool of a declared tool server (which server a subagent declares is checked by the model).
SERVER_TOOL_ENTRY = r"^([a-z0-9-]+:)?[a-z0-9-]+[.][A-Za-z0-9_.-]+$"
APPROVAL_SUBAGENT_MESSAGE = "approvalRequired: SUBAGENT in SUBAGENT:TOOL must be one of spec.subagents"
UNIQUE_SUBAGENTS_MESSAGE = "subagent names must be unique"
FORK_IMMUTABLE_MESSAGE = "forkFrom is immutable"

EVENTS_URL_PATTERN = r"^(sqlite|etcd)://.*$"
ARTIFACTS_URL_PATTERN = r"^(file|s3)://.*$"
EVENTS_URL_MESSAGE = "stores.events must be a sqlite:// or etcd:// URL"
ARTIFACTS_URL_MESSAGE = "stores.artifacts must be a file:// or s3:// URL"
# A Secret's name: a DNS subdomain.
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _cel_string(text: str) -> str:
    """A CEL string literal: a regular expression's backslashes must be escaped once more."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_cel_string(value) for value in values) + "]"


def _cel_matches(field: str, pattern: str, message: str) -> JsonDict:
    """A CEL rule: the optional field, when set, matches the pattern (anchored at both ends);
    `_matches` is the same rule for pydantic."""
    return {
        "rule": f"!has(self.{field}) || self.{field}.matches({_cel_string(pattern)})",
        "message": message,
        "fieldPath": f".{field}",
    }


def _matches(pattern: str, message: str) -> AfterValidator:
    # fullmatch: with `$` alone, Python would also accept a trailing newline, which RE2 does not.
    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise ValueError(message)
        return value

    return AfterValidator(check)


def _image_name(name: str) -> str:
    if not re.fullmatch(IMAGE_NAME_PATTERN, name):
        raise ValueError(IMAGE_NAME_MESSAGE)
    return name


ImageName = Annotated[str, Field(max_length=63), AfterValidator(_image_name)]


def is_plain_file_name(name: str) -> bool:
    return len(name) <= PLAIN_FILE_NAME_MAX and re.fullmatch(PLAIN_FILE_NAME_PATTERN, name) is not None


def check_deliverable_name(name: str) -> str:
    """The name, when a deliverable may carry it; ValueError otherwise. The manifest, the harness
    that records a deliverable and the CLI that downloads one all check with this."""
    if not is_plain_file_name(name):
        raise ValueError(f"{DELIVERABLE_MESSAGE} (at most {PLAIN_FILE_NAME_MAX} characters), got {name!r}")
    return name


def is_workspace_relative(path: str) -> bool:
    return not path.startswith("/") and ".." not in path.split("/")


def _no_number(value: Any) -> Any:
    # A number would otherwise be read as a Unix time; the apiserver wants an RFC 3339 string.
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise PydanticCustomError("datetime_type", "Input should be an RFC 3339 date-time")
    return value


# Lax, so the RFC 3339 text of a manifest parses; never a number.
Timestamp = Annotated[AwareDatetime, BeforeValidator(_no_number), Field(strict=False)]


class ObjectMeta(BaseModel):
    # Kubernetes metadata carries many fields we do not interpret; keep them, never reject them.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, name: str) -> str:
        if not re.fullmatch(SESSION_NAME_PATTERN, name):
            raise ValueError(SESSION_NAME_MESSAGE)
        return name


class SessionRequest(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.parts) || self.parts.all(k, k.matches("
                    + _cel_string(PART_NAME_PATTERN)
                    + "))",
                    "message": PART_NAME_MESSAGE,
                    "fieldPath": ".parts",
                }
            ]
        }
    )

    goal: str = Field(min_length=1, max_length=GOAL_MAX_CHARS)
    parts: dict[str, Annotated[str, Field(max_length=PART_MAX_CHARS)]] = Field(
        default_factory=dict, max_length=PARTS_MAX
    )

    @field_validator("parts")
    @classmethod
    def _part_names(cls, parts: dict[str, str]) -> dict[str, str]:
        if not all(re.fullmatch(PART_NAME_PATTERN, name) for name in parts):
            raise ValueError(PART_NAME_MESSAGE)
        return parts


class ExecutorSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.type != 'scripted' || has(self.plan)", "message": PLAN_REQUIRED_MESSAGE},
                {
                    "rule": f"!(self.type in {_cel_list(MODEL_EXECUTORS)}) || has(self.model)",
                    "message": MODEL_REQUIRED_MESSAGE,
                },
                {
                    "rule": f"!has(self.plan) || self.type in {_cel_list(PLAN_EXECUTORS)}",
                    "message": PLAN_ONLY_SCRIPTED_MESSAGE,
                },
                {
                    "rule": f"self.type in {_cel_list(MODEL_EXECUTORS)} || "
                    "(!has(self.model) && !has(self.baseURL))",
                    "message": MODEL_ONLY_PROVIDERS_MESSAGE,
                },
                {
                    "rule": f"!(self.type in {_cel_list(MANAGED_EXECUTORS)}) || !has(self.baseURL)",
                    "message": MANAGED_BASE_URL_MESSAGE,
                },
                {
                    "rule": "self.type != 'scripted' || !has(self.credentialsSecret)",
                    "message": CREDENTIALS_SECRET_MESSAGE,
                },
                {
                    "rule": "!has(self.maxOutputTokens) || "
                    f"self.type in {_cel_list(OUTPUT_TOKENS_EXECUTORS)}",
                    "message": MAX_OUTPUT_TOKENS_MESSAGE,
                },
                _cel_matches("baseURL", BASE_URL_PATTERN, BASE_URL_MESSAGE),
                _cel_matches("image", IMAGE_NAME_PATTERN, IMAGE_NAME_MESSAGE),
            ]
        }
    )

    # Only what runs today: a type that is not implemented is refused here, never at run time.
    type: Literal["scripted", "openai", "anthropic", "openai-agents", "anthropic-managed"]
    # The YAML plan for `scripted` (for a managed executor: what the local stand-in's remote agent
    # follows): relative to the manifest for `belay run`; in a cluster, a path inside the harness
    # image.
    plan: str | None = Field(default=None, min_length=1, max_length=4096)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    base_url: Annotated[str, Field(max_length=2048), _matches(BASE_URL_PATTERN, BASE_URL_MESSAGE)] | None = (
        Field(default=None, alias="baseURL")
    )
    # In a cluster: the name of one of the harness images the operator allows (its default when
    # omitted).
    image: ImageName | None = None
    # In a cluster: the Secret whose OPENAI_API_KEY / OPENAI_BASE_URL (or ANTHROPIC_API_KEY /
    # ANTHROPIC_BASE_URL) keys reach the harness pod's environment, and nothing else.
    credentials_secret: str | None = Field(default=None, pattern=SECRET_NAME_PATTERN, max_length=253)
    # The most output tokens one model turn may produce (`openai`: `max_output_tokens`; `anthropic`:
    # `max_tokens`, 4096 when unset). Unset on `openai`: the server's own limit, which a local
    # server may not have.
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS, alias="maxOutputTokens")

    @property
    def managed(self) -> bool:
        return self.type in MANAGED_EXECUTORS

    @model_validator(mode="after")
    def _fields_of_the_type(self) -> ExecutorSpec:
        if self.type == "scripted" and self.plan is None:
            raise ValueError(PLAN_REQUIRED_MESSAGE)
        if self.type in MODEL_EXECUTORS and self.model is None:
            raise ValueError(MODEL_REQUIRED_MESSAGE)
        if self.plan is not None and self.type not in PLAN_EXECUTORS:
            raise ValueError(PLAN_ONLY_SCRIPTED_MESSAGE)
        if self.type not in MODEL_EXECUTORS and (self.model is not None or self.base_url is not None):
            raise ValueError(MODEL_ONLY_PROVIDERS_MESSAGE)
        if self.type in MANAGED_EXECUTORS and self.base_url is not None:
            raise ValueError(MANAGED_BASE_URL_MESSAGE)
        if self.type == "scripted" and self.credentials_secret is not None:
            raise ValueError(CREDENTIALS_SECRET_MESSAGE)
        if self.max_output_tokens is not None and self.type not in OUTPUT_TOKENS_EXECUTORS:
            raise ValueError(MAX_OUTPUT_TOKENS_MESSAGE)
        return self


class SubagentInput(ApiModel):
    """A directory (`source`), a repository at one commit (`git`) or another session's proven
    deliverable (`artifact`), copied into the subagent's workspace when the session starts."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": _CEL_NO_DOTDOT.format(x="self.target"),
                    "message": INPUT_TARGET_MESSAGE,
                    "fieldPath": ".target",
                },
                {
                    "rule": "(has(self.source) ? 1 : 0) + (has(self.git) ? 1 : 0) + "
                    "(has(self.artifact) ? 1 : 0) == 1",
                    "message": INPUT_ONE_SOURCE_MESSAGE,
                },
                {
                    "rule": "has(self.source) || !has(self.hostPath) || !self.hostPath",
                    "message": INPUT_GIT_HOST_PATH_MESSAGE,
                },
                {
                    "rule": "!has(self.source) || (has(self.hostPath) && self.hostPath) || ("
                    + _CEL_NO_DOTDOT.format(x="self.source")
                    + ")",
                    "message": INPUT_SOURCE_MESSAGE,
                    "fieldPath": ".source",
                },
            ]
        }
    )

    # Relative to the manifest for `belay run` (and inside its directory); with `hostPath: true`,
    # any directory of the machine the harness runs on (in a cluster, a path inside the harness
    # image).
    source: str | None = Field(default=None, min_length=1, max_length=4096)
    git: GitInput | None = None
    artifact: ArtifactInput | None = None
    target: str = Field(min_length=1, max_length=1024)
    host_path: bool = False

    @field_validator("target")
    @classmethod
    def _inside_workspace(cls, target: str) -> str:
        if not is_workspace_relative(target):
            raise ValueError(INPUT_TARGET_MESSAGE)
        return target

    @model_validator(mode="after")
    def _source_beside_the_manifest(self) -> SubagentInput:
        if [self.source, self.git, self.artifact].count(None) != 2:
            raise ValueError(INPUT_ONE_SOURCE_MESSAGE)
        if self.source is None and self.host_path:
            raise ValueError(INPUT_GIT_HOST_PATH_MESSAGE)
        if self.source is not None and not self.host_path and not is_workspace_relative(self.source):
            raise ValueError(INPUT_SOURCE_MESSAGE)
        return self


class SubagentSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.allowlist) || size(self.allowlist) == 0 || "
                    "self.networkProfile == 'allowlist'",
                    "message": ALLOWLIST_MESSAGE,
                    "fieldPath": ".allowlist",
                },
                _cel_matches("deliverable", PLAIN_FILE_NAME_PATTERN, DELIVERABLE_MESSAGE),
                _cel_matches("image", IMAGE_NAME_PATTERN, IMAGE_NAME_MESSAGE),
                _cel_matches("runtimeClassName", IMAGE_NAME_PATTERN, RUNTIME_CLASS_MESSAGE),
                {
                    "rule": "!has(self.declared) || self.declared.all(p, "
                    + _CEL_NO_DOTDOT.format(x="p")
                    + ")",
                    "message": DECLARED_MESSAGE,
                    "fieldPath": ".declared",
                },
                {"rule": _CEL_INPUTS_DECLARED, "message": INPUTS_DECLARED_MESSAGE, "fieldPath": ".inputs"},
            ]
        }
    )

    # A label value and part of pod names, hence the length bound.
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=SUBAGENT_NAME_MAX)
    role: str = Field(default="", max_length=1024)
    # In a cluster: the name of one of the sandbox images the operator allows (its default when
    # omitted).
    image: ImageName | None = None
    # In a cluster: the RuntimeClass of this subagent's sandbox pods (gVisor, Kata), one the
    # operator allows; the operator's default for the network profile when omitted.
    runtime_class_name: (
        Annotated[str, Field(max_length=63), _matches(IMAGE_NAME_PATTERN, RUNTIME_CLASS_MESSAGE)] | None
    ) = None
    network_profile: Literal["none", "allowlist", "internet"] = "none"
    allowlist: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list, max_length=64
    )
    # The effect class of this subagent's run_command calls (belay.journal.tools.effect_of): by
    # default idempotent with networkProfile none and unsafe otherwise, since a command that
    # reaches a network may change something outside the sandbox, and an unsafe call is never run
    # again blindly after a recovery. `idempotent` says the commands only read from the network (a
    # build fetching its dependencies), so they may run again.
    command_effect: Literal["idempotent", "unsafe"] | None = None
    # A local sandbox refuses to start without its walls (bubblewrap) unless this is "best-effort";
    # a sandbox pod's walls are its security context and NetworkPolicy, always in force.
    isolation: Literal["required", "best-effort"] = "required"
    deliverable: (
        Annotated[
            str, Field(max_length=PLAIN_FILE_NAME_MAX), _matches(PLAIN_FILE_NAME_PATTERN, DELIVERABLE_MESSAGE)
        ]
        | None
    ) = None
    inputs: list[SubagentInput] = Field(default_factory=list, max_length=16)
    # Workspace paths (glob patterns) that make up the subagent's declared state: only these
    # survive a sandbox replacement.
    declared: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list, max_length=64
    )
    # The sandbox's resource walls (belay.api.resources): each has a default.
    resources: SandboxResources = SandboxResources()
    # MCP servers its sandbox runs, whose tools it may call as `<server>.<tool>` (belay.api.tool_servers).
    tool_servers: Annotated[list[ToolServerSpec], AfterValidator(unique_servers)] = Field(
        default_factory=list, max_length=16
    )

    @field_validator("allowlist")
    @classmethod
    def _allowlist_needs_its_profile(cls, allowlist: list[str], info: ValidationInfo) -> list[str]:
        if allowlist and info.data.get("network_profile") != "allowlist":
            raise ValueError(ALLOWLIST_MESSAGE)
        return allowlist

    @field_validator("declared")
    @classmethod
    def _declared_inside_workspace(cls, declared: list[str]) -> list[str]:
        if not all(is_workspace_relative(pattern) for pattern in declared):
            raise ValueError(DECLARED_MESSAGE)
        return declared

    @model_validator(mode="after")
    def _inputs_are_declared(self) -> SubagentSpec:
        for item in self.inputs if self.declared else ():
            if not any(covers_input(pattern, item.target) for pattern in self.declared):
                declared = ", ".join(repr(p) for p in self.declared) or "nothing"
                raise ValueError(
                    f"{INPUTS_DECLARED_MESSAGE}; subagent {self.name!r}: input target {item.target!r} "
                    f"is outside declared ({declared}) and would be dropped on a restore"
                )
        return self


class ApprovalGrant(ApiModel):
    """An approval given declaratively (so it can live in Git): one operation, one payload hash."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "has(self.operationId) || has(self.approvalId)", "message": APPROVAL_NAMES_MESSAGE}
            ]
        }
    )

    operation_id: str | None = Field(default=None, min_length=1, max_length=512)
    approval_id: str | None = Field(default=None, min_length=1, max_length=512)
    payload_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # RFC 3339 with a time zone: a time without one means a different instant on every machine.
    expires_at: Timestamp | None = None

    @model_validator(mode="after")
    def _names_one_operation(self) -> ApprovalGrant:
        if not (self.operation_id or self.approval_id):
            raise ValueError(APPROVAL_NAMES_MESSAGE)
        return self


class RejectionGrant(ApiModel):
    """A rejection given declaratively (`kubectl belay reject` writes one): a published
    deliverable, by name, or a pending approval, by id, bound to the exact bytes (the deliverable's
    sha256) or payload (the approval's hash) rejected, with the reason the step is redone with."""

    item: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    reason: str = Field(min_length=1)
    by: str | None = None


class SpecDecision(ApiModel):
    """A person's decision on what waits that is neither an approval nor a rejection of an
    operation or a deliverable, as `kubectl belay answer|reconcile` (and `approve|reject` of a
    wait) write it: the operator records it while what it names still waits, under the same claim
    a local decision takes, so one decision per item is recorded."""

    # A wait id (an approval id is taken too); an operation id whose outcome is unknown for
    # succeeded/failed.
    id: str = Field(min_length=1, max_length=512)
    # yes: approve, or a yes (an answer) to a wait; no: reject, or a no; succeeded/failed: whether
    # an operation whose outcome is unknown took effect.
    verdict: Literal["yes", "no", "succeeded", "failed"]
    text: str = Field(default="", max_length=8192)  # the answer, or the reason
    by: str = Field(default="", max_length=253)


# Upper bounds: a number nobody could mean (10^30 model calls) is a typo, refused with the bound
# named rather than taken as "no limit".
MAX_MODEL_CALLS = 1_000_000
MAX_ATTEMPTS = 1_000


class Budgets(ApiModel):
    # Only budgets the harness enforces: one it ignored would be a promise nobody keeps.
    max_model_calls: int | None = Field(default=None, ge=1, le=MAX_MODEL_CALLS)


class RecoveryPolicy(ApiModel):
    max_attempts: int = Field(default=5, ge=1, le=MAX_ATTEMPTS)


class ToolLimits(ApiModel):
    """What one sandbox call may bring back into the harness: a file above readFileBytes is refused
    (its bytes go to the artifact store instead), a command's output is cut at commandOutputBytes
    per stream. Each at most 16 MiB."""

    read_file_bytes: int = Field(default=DEFAULT_READ_FILE_BYTES, ge=1, le=MAX_CAPTURE_BYTES)
    command_output_bytes: int = Field(default=DEFAULT_COMMAND_OUTPUT_BYTES, ge=1, le=MAX_CAPTURE_BYTES)


class StoresSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel_matches("events", EVENTS_URL_PATTERN, EVENTS_URL_MESSAGE),
                _cel_matches("artifacts", ARTIFACTS_URL_PATTERN, ARTIFACTS_URL_MESSAGE),
            ]
        }
    )

    events: (
        Annotated[str, Field(max_length=2048), _matches(EVENTS_URL_PATTERN, EVENTS_URL_MESSAGE)] | None
    ) = None
    artifacts: (
        Annotated[str, Field(max_length=2048), _matches(ARTIFACTS_URL_PATTERN, ARTIFACTS_URL_MESSAGE)] | None
    ) = None
    # Credentials come from a Secret, never inline.
    secret_ref: str | None = Field(default=None, max_length=253, pattern=SECRET_NAME_PATTERN)


class ForkFrom(ApiModel):
    """Start from another session's checkpoint instead of from an empty record."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": FORK_IMMUTABLE_MESSAGE}]
        }
    )

    session: str = Field(pattern=SESSION_NAME_PATTERN)
    # A checkpoint id from the source session; its last verified checkpoint when omitted.
    checkpoint: str | None = Field(default=None, min_length=1, max_length=512)


class RetentionPolicy(ApiModel):
    """What happens to the session record and its artifacts when the AgentSession is deleted.
    The pods always go; the record and the artifacts stay unless this says Delete."""

    record: Literal["Retain", "Delete"] = "Retain"
    artifacts: Literal["Retain", "Delete"] = "Retain"


def _approval_tool(entry: str) -> str:
    return entry.split(":", 1)[1] if ":" in entry else entry


def _server_tool(entry: str, subagents: list[SubagentSpec]) -> bool:
    """Whether an entry names `<server>.<tool>` of a server its subagent (any, without one) declares."""
    server, dot, tool = _approval_tool(entry).partition(".")
    named = entry.split(":", 1)[0] if ":" in entry else None
    return bool(dot and tool) and any(
        server in {s.name for s in sub.tool_servers} for sub in subagents if named in (None, sub.name)
    )


class AgentSessionSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.subagents.all(a, self.subagents.exists_one(b, b.name == a.name))",
                    "message": UNIQUE_SUBAGENTS_MESSAGE,
                    "fieldPath": ".subagents",
                },
                {
                    "rule": "!has(self.approvalRequired) || self.approvalRequired.all(r, !r.contains(':') || "
                    "self.subagents.exists(s, s.name == r.substring(0, r.indexOf(':'))))",
                    "message": APPROVAL_SUBAGENT_MESSAGE,
                    "fieldPath": ".approvalRequired",
                },
                {
                    # The fork is decided when the session is created: a session that was not a
                    # fork never becomes one, and a fork never stops being one.
                    "rule": "has(self.forkFrom) == has(oldSelf.forkFrom)",
                    "message": FORK_IMMUTABLE_MESSAGE,
                    "fieldPath": ".forkFrom",
                },
            ]
        }
    )

    request: SessionRequest
    executor: ExecutorSpec
    subagents: list[SubagentSpec] = Field(min_length=1, max_length=SUBAGENTS_MAX)
    approvals: list[ApprovalGrant] = Field(default_factory=list, max_length=256)
    rejections: list[RejectionGrant] = Field(default_factory=list, max_length=256)
    decisions: list[SpecDecision] = Field(default_factory=list, max_length=256)
    # Tools whose calls wait for an approval: "tool" for every subagent, "subagent:tool" for one.
    approval_required: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"self.all(r, r in {_cel_list(TOOL_NAMES)} || (r.contains(':') && "
                    f"r.substring(r.indexOf(':') + 1) in {_cel_list(TOOL_NAMES)}) || "
                    f"r.matches('{SERVER_TOOL_ENTRY}'))",
                    "message": APPROVAL_TOOL_MESSAGE,
                }
            ]
        },
    )
    budgets: Budgets = Budgets()
    limits: ToolLimits = ToolLimits()
    recovery: RecoveryPolicy = RecoveryPolicy()
    stores: StoresSpec = StoresSpec()
    fork_from: ForkFrom | None = None
    retention: RetentionPolicy = RetentionPolicy()
    # In a cluster, a record written for another AgentSession of this namespace and name (one
    # deleted and created again) is refused unless this says to adopt it.
    adopt_record: bool = False

    @field_validator("subagents")
    @classmethod
    def _unique_names(cls, subagents: list[SubagentSpec]) -> list[SubagentSpec]:
        names = [s.name for s in subagents]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"{UNIQUE_SUBAGENTS_MESSAGE}, repeated: {', '.join(duplicates)}")
        return subagents

    @field_validator("approval_required")
    @classmethod
    def _known_tools_and_subagents(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        # A misspelled tool or subagent would otherwise turn its gate off without a word.
        subagents = info.data.get("subagents", [])
        if not all(_approval_tool(entry) in TOOLS or _server_tool(entry, subagents) for entry in entries):
            raise ValueError(APPROVAL_TOOL_MESSAGE)
        names = {s.name for s in subagents}
        if "subagents" in info.data and any(
            ":" in entry and entry.split(":", 1)[0] not in names for entry in entries
        ):
            raise ValueError(APPROVAL_SUBAGENT_MESSAGE)
        return entries


class AgentSession(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, strict=True)

    api_version: Literal["belay.dev/v1alpha1"] = Field(default="belay.dev/v1alpha1", alias="apiVersion")
    kind: Literal["AgentSession"] = "AgentSession"
    metadata: ObjectMeta
    spec: AgentSessionSpec
    # Written by the operator; a manifest read back from the cluster carries it.
    status: AgentSessionStatus | None = Field(default=None, strict=False)

    @property
    def session_id(self) -> str:
        return self.metadata.name

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def on_executor(self, executor: Mapping[str, Any]) -> AgentSession:
        """The same session on another executor (`spec.executor` as the API spells it), validated
        as the API validates it: ManifestError when it refuses it."""
        try:
            spec = ExecutorSpec.model_validate(dict(executor))
        except ValidationError as error:
            raise ManifestError(f"spec.executor: {describe_validation_error(error)}") from None
        return self.model_copy(update={"spec": self.spec.model_copy(update={"executor": spec})})

    def as_recorded(self, changes: Sequence[ExecutorChangeRecord]) -> AgentSession:
        """The session as its next attempt runs it: on the executor its record last moved it to
        (`belay resume --executor`, an edit of `spec.executor`), else on the manifest's."""
        return self.on_executor(changes[-1].executor) if changes else self


def _as_json_values(data: Any) -> Any:
    """YAML's own types (timestamps, dates) as the text the apiserver would receive."""
    if isinstance(data, dict):
        return {key: _as_json_values(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_as_json_values(value) for value in data]
    if isinstance(data, datetime | date):
        return data.isoformat()
    return data


def parse_manifest(data: Any, *, source: str = "manifest") -> AgentSession:
    if not isinstance(data, dict) or not ({"apiVersion", "kind"} & set(data)):
        # Nothing of a file that is no manifest is quoted back (a key of it may be a secret's line).
        raise ManifestError(f"{source}: expected a YAML mapping with apiVersion, kind, metadata, spec")
    try:
        return AgentSession.model_validate(_as_json_values(data))
    except ValidationError as error:
        raise ManifestError(f"{source}: {describe_validation_error(error)}") from None


def read_manifest(path: Path) -> Any:
    """The YAML of a manifest file, not yet validated."""
    try:
        text = read_regular_file(path).decode()
    except FileRefused as error:
        raise ManifestError(f"{path}: {error}") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{path}: not a text file (not UTF-8)") from None
    try:
        return load_yaml(text)  # aliases bounded before anything walks the document (bounded_yaml)
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {describe_yaml_error(error)}") from None


def load_manifest(path: Path) -> AgentSession:
    return parse_manifest(read_manifest(path), source=str(path))
