"""The Checkpoint custom resource: one per checkpoint recorded in a session, owned by the session,
so `kubectl get checkpoints` lists the recovery points and a new session can fork from one.

The operator writes it from the checkpoint event; it is a mirror, so its spec never changes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from belay.api.agentsession import SESSION_NAME_PATTERN, ApiModel

CHECKPOINT_KIND = "Checkpoint"
SHA256_PATTERN = r"^[0-9a-f]{64}$"


class CheckpointVerification(ApiModel):
    command: str
    status: Literal["passed", "failed", "not_run"] = "not_run"
    exit_code: int | None = None


class CheckpointArtifact(ApiModel):
    name: str
    sha256: str = Field(pattern=SHA256_PATTERN)
    size: int = Field(ge=0)


class CheckpointSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "a Checkpoint mirrors the record and is immutable"}
            ]
        }
    )

    session: str = Field(pattern=SESSION_NAME_PATTERN)
    checkpoint_id: str = Field(min_length=1)
    seq: int = Field(ge=1)  # the checkpoint event's own seq
    covers_seq: int = Field(ge=0)
    verified: bool
    verification: CheckpointVerification | None = None
    subagent: str | None = None
    next_step: str | None = None
    completed_steps: list[str] = Field(default_factory=list)
    repository_revision: str | None = None
    runtime_image: str | None = None
    declared_artifacts: list[CheckpointArtifact] = Field(default_factory=list)
    # Declared files too many for one event: the sha256 of the manifest in the artifact store that
    # lists them (`declared_artifacts` is empty then).
    declared_manifest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class Checkpoint(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    api_version: Literal["belay.dev/v1alpha1"] = Field(default="belay.dev/v1alpha1", alias="apiVersion")
    kind: Literal["Checkpoint"] = "Checkpoint"
    metadata: dict[str, Any]
    spec: CheckpointSpec
