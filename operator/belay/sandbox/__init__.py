"""Sandboxes: the token-authenticated server that runs tools in a workspace (`server`, `app`), its
client (`client.SandboxClient`), local sandbox processes (`local.LocalSandbox`) and declared-state
restore (`restore.restore`).

Nothing is imported here: the server's entry point must start without loading aiohttp or pydantic.
"""
