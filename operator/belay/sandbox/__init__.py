"""Sandboxes: the token-authenticated server that runs tools in a workspace, its client, local
sandbox processes, and declared-state restore."""

from belay.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable

__all__ = ["SandboxClient", "SandboxError", "SandboxUnavailable"]
