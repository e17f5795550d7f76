"""CRD models; the CRD YAML is generated from them (`python -m belay.api.generate`)."""

from belay.api.agentsession import (
    API_VERSION,
    AgentSession,
    AgentSessionSpec,
    ForkFrom,
    ManifestError,
    RetentionPolicy,
    SubagentSpec,
    load_manifest,
    parse_manifest,
)
from belay.api.checkpoint import Checkpoint, CheckpointSpec
from belay.api.status import AgentSessionStatus, ConditionType, Phase, Reason

__all__ = [
    "API_VERSION",
    "AgentSession",
    "AgentSessionSpec",
    "AgentSessionStatus",
    "Checkpoint",
    "CheckpointSpec",
    "ConditionType",
    "ForkFrom",
    "ManifestError",
    "Phase",
    "Reason",
    "RetentionPolicy",
    "SubagentSpec",
    "load_manifest",
    "parse_manifest",
]
