"""A request's arguments, as recorded and as run.

A string argument too large for the record (a whole file to write) is stored in the artifact store
and the request keeps its hash, so an approval still binds the exact bytes; the call that runs it,
now or when a new attempt replays it, reads it back. Any other value too large (a list of 50,000
short strings) is stored the same way as its JSON, marked so, and read back as the value it was:
what a model sends is never a request too large to record, which would stop the attempt.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from belay.journal.events import ARTIFACT_ARGUMENT
from belay.stores.base import ArtifactStore

# A string argument above this size is stored as an artifact and referenced by hash.
LARGE_ARGUMENT_BYTES = 16 * 1024


async def externalize_arguments(artifacts: ArtifactStore, arguments: dict[str, Any]) -> dict[str, Any]:
    """Large string arguments (a whole file to write) go to the artifact store; the request keeps
    their hash, so the record stays small and an approval still binds the exact bytes."""
    result = dict(arguments)
    for key, value in arguments.items():
        if isinstance(value, str) and len(value.encode()) > LARGE_ARGUMENT_BYTES:
            ref = await asyncio.to_thread(artifacts.put, value.encode(), media_type="text/plain")
            result[key] = {ARTIFACT_ARGUMENT: ref.sha256, "size": ref.size}
        elif not isinstance(value, str) and (
            len(encoded := json.dumps(value).encode()) > LARGE_ARGUMENT_BYTES or _looks_stored(value)
        ):
            # A value shaped like a stored argument came from the model, not from here: kept as
            # the value it is, never read back as the blob it names (any blob of the store).
            ref = await asyncio.to_thread(artifacts.put, encoded, media_type="application/json")
            result[key] = {ARTIFACT_ARGUMENT: ref.sha256, "size": ref.size, "json": True}
    return result


async def resolve_arguments(artifacts: ArtifactStore, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the tool is called with them: each stored one read back from the store."""
    result = dict(arguments)
    for key, value in arguments.items():
        if isinstance(value, dict) and set(value) == {ARTIFACT_ARGUMENT, "size"}:
            data = await asyncio.to_thread(artifacts.get, value[ARTIFACT_ARGUMENT])
            result[key] = data.decode()
        elif isinstance(value, dict) and set(value) == {ARTIFACT_ARGUMENT, "size", "json"}:
            data = await asyncio.to_thread(artifacts.get, value[ARTIFACT_ARGUMENT])
            result[key] = json.loads(data)
    return result


def _looks_stored(value: Any) -> bool:
    return isinstance(value, dict) and ARTIFACT_ARGUMENT in value
