"""CRD models; the CRD YAML is generated from them."""

from belay.api.agentsession import (
    API_VERSION,
    AgentSession,
    AgentSessionSpec,
    ManifestError,
    SubagentSpec,
    load_manifest,
    parse_manifest,
)

__all__ = [
    "API_VERSION",
    "AgentSession",
    "AgentSessionSpec",
    "ManifestError",
    "SubagentSpec",
    "load_manifest",
    "parse_manifest",
]
