"""The AgentSession custom resource (belay.dev/v1alpha1), as pydantic models.

These models are the single source of truth for the manifest: `belay run` validates a YAML file
against them, and the operator generates its CRD from them. Field names are snake_case in Python
and camelCase on the wire, as Kubernetes expects.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from belay.api.status import AgentSessionStatus

API_VERSION = "belay.dev/v1alpha1"
KIND = "AgentSession"

# RFC 1123 label: the session id becomes part of object names in a cluster.
SESSION_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SUBAGENT_NAME_MAX = 40
# Bounds the CEL uniqueness check's cost, which the apiserver estimates from maxItems.
SUBAGENTS_MAX = 32


class ApiModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class ObjectMeta(BaseModel):
    # Kubernetes metadata carries many fields we do not interpret; keep them, never reject them.
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(pattern=SESSION_NAME_PATTERN)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SessionRequest(ApiModel):
    goal: str = Field(min_length=1)
    parts: dict[str, str] = Field(default_factory=dict)


class ExecutorSpec(ApiModel):
    # Each CEL rule mirrors the pydantic validator below, so the apiserver refuses what `belay run`
    # refuses, with the same message.
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.type != 'scripted' || has(self.plan)",
                    "message": "executor.plan is required when executor.type is 'scripted'",
                },
                {
                    "rule": "!(self.type in ['openai', 'anthropic']) || has(self.model)",
                    "message": "executor.model is required when executor.type is 'openai' or 'anthropic'",
                },
            ]
        }
    )

    type: Literal["scripted", "openai", "anthropic", "managed"]
    plan: str | None = None  # path of the YAML plan for `scripted`, relative to the manifest
    model: str | None = None
    base_url: str | None = Field(default=None, alias="baseURL")
    image: str | None = None

    @model_validator(mode="after")
    def _plan_for_scripted(self) -> ExecutorSpec:
        if self.type == "scripted" and not self.plan:
            raise ValueError("executor.plan is required when executor.type is 'scripted'")
        if self.type in ("openai", "anthropic") and not self.model:
            raise ValueError(f"executor.model is required when executor.type is '{self.type}'")
        return self


class SubagentInput(ApiModel):
    """A directory (relative to the manifest) copied into the subagent's workspace at start."""

    source: str
    target: str


class SubagentSpec(ApiModel):
    # A label value and part of pod names, hence the length bound.
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=SUBAGENT_NAME_MAX)
    role: str = ""
    image: str | None = None
    network_profile: Literal["none", "allowlist", "internet"] = "none"
    allowlist: list[str] = Field(default_factory=list)
    # A local sandbox refuses to start without its walls (bubblewrap) unless this is "best-effort";
    # a sandbox pod's walls are its security context and NetworkPolicy, always in force.
    isolation: Literal["required", "best-effort"] = "required"
    deliverable: str | None = None
    inputs: list[SubagentInput] = Field(default_factory=list)
    # Workspace paths (glob patterns) that make up the subagent's declared state: only these
    # survive a sandbox replacement.
    declared: list[str] = Field(default_factory=list)


class ApprovalGrant(ApiModel):
    """An approval given declaratively (so it can live in Git): one operation, one payload hash."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.operationId) || has(self.approvalId)",
                    "message": "an approval needs operationId or approvalId",
                }
            ]
        }
    )

    operation_id: str | None = None
    approval_id: str | None = None
    payload_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    expires_at: datetime | None = None

    @model_validator(mode="after")
    def _names_one_operation(self) -> ApprovalGrant:
        if not (self.operation_id or self.approval_id):
            raise ValueError("an approval needs operationId or approvalId")
        return self


class RejectionGrant(ApiModel):
    """A rejection given declaratively (`kubectl belay reject` writes one): a published
    deliverable, by name, or a pending approval, by id, bound to the exact bytes (the deliverable's
    sha256) or payload (the approval's hash) rejected, with the reason the step is redone with."""

    item: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    reason: str = Field(min_length=1)
    by: str | None = None


class Budgets(ApiModel):
    max_steps: int | None = Field(default=None, ge=1)
    max_model_calls: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_wall_clock_s: int | None = Field(default=None, ge=1)


class RecoveryPolicy(ApiModel):
    max_attempts: int = Field(default=5, ge=1)


class StoresSpec(ApiModel):
    events: str | None = None  # e.g. "sqlite:///path" or "etcd://..." ; default: the local home
    artifacts: str | None = None
    secret_ref: str | None = None  # credentials come from a Secret, never inline


class ForkFrom(ApiModel):
    """Start from another session's checkpoint instead of from an empty record."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "forkFrom is immutable"}]
        }
    )

    session: str = Field(pattern=SESSION_NAME_PATTERN)
    # A checkpoint id from the source session; its last verified checkpoint when omitted.
    checkpoint: str | None = None


class RetentionPolicy(ApiModel):
    """What happens to the session record and its artifacts when the AgentSession is deleted.
    The pods always go; the record and the artifacts stay unless this says Delete."""

    record: Literal["Retain", "Delete"] = "Retain"
    artifacts: Literal["Retain", "Delete"] = "Retain"


class AgentSessionSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.subagents.all(a, self.subagents.exists_one(b, b.name == a.name))",
                    "message": "subagent names must be unique",
                    "fieldPath": ".subagents",
                }
            ]
        }
    )

    request: SessionRequest
    executor: ExecutorSpec
    subagents: list[SubagentSpec] = Field(min_length=1, max_length=SUBAGENTS_MAX)
    approvals: list[ApprovalGrant] = Field(default_factory=list)
    rejections: list[RejectionGrant] = Field(default_factory=list)
    # Tools whose calls wait for an approval: "tool" for every subagent, "subagent:tool" for one.
    approval_required: list[str] = Field(default_factory=list)
    budgets: Budgets = Budgets()
    recovery: RecoveryPolicy = RecoveryPolicy()
    stores: StoresSpec = StoresSpec()
    fork_from: ForkFrom | None = None
    retention: RetentionPolicy = RetentionPolicy()

    @model_validator(mode="after")
    def _unique_subagents(self) -> AgentSessionSpec:
        names = [s.name for s in self.subagents]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"subagent names must be unique, repeated: {', '.join(duplicates)}")
        return self


class AgentSession(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    api_version: Literal["belay.dev/v1alpha1"] = Field(default="belay.dev/v1alpha1", alias="apiVersion")
    kind: Literal["AgentSession"] = "AgentSession"
    metadata: ObjectMeta
    spec: AgentSessionSpec
    # Written by the operator; a manifest read back from the cluster carries it.
    status: AgentSessionStatus | None = None

    @property
    def session_id(self) -> str:
        return self.metadata.name

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ManifestError(ValueError):
    """A manifest that cannot be used, with every offending field named."""


def _field_path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(root)"


def describe_validation_error(error: ValidationError) -> str:
    lines = []
    for issue in error.errors():
        message = re.sub(r"^Value error, ", "", issue["msg"])
        lines.append(f"{_field_path(tuple(issue['loc']))}: {message}")
    return "\n".join(lines)


def parse_manifest(data: Any, *, source: str = "manifest") -> AgentSession:
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: expected a YAML mapping with apiVersion, kind, metadata, spec")
    try:
        return AgentSession.model_validate(data)
    except ValidationError as error:
        raise ManifestError(f"{source}:\n{describe_validation_error(error)}") from None


def load_manifest(path: Path) -> AgentSession:
    try:
        text = path.read_text()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {error}") from None
    return parse_manifest(data, source=str(path))
