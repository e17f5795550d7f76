"""An input taken from a deliverable of another session (`inputs[].artifact`), as a pydantic model.

`session` is a session's name, never a namespace/name pair: the source is always a session of the
consuming session's own namespace (of the same home for `belay run`), so a tenant cannot name
another team's record. `deliverable` is the name the source published it under, the one `belay
artifacts get SESSION NAME` takes. `sha256`, when given, pins the bytes: the source's proven
deliverable must be exactly those. `belay run` writes the pin itself into the stored manifest when
the manifest gives none, so every sandbox of the session is seeded with the bytes proven when it
started, whatever the source does later.
Each rule is written as a CEL rule for the apiserver and as the pydantic validator `belay run`
runs, with one message for both, as in `belay.api.agentsession`.
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, field_validator
from pydantic.json_schema import JsonDict

from belay.api.base import ApiModel

# A session name (a DNS label): no '/', so no other namespace can be named.
SOURCE_SESSION_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SOURCE_SESSION_MESSAGE = (
    "inputs[].artifact.session must be the name of a session of the same namespace (a DNS label: "
    "at most 63 lowercase letters, digits and '-'; never namespace/name)"
)
# The deliverable names a subagent publishes under (`belay.api.agentsession.PLAIN_FILE_NAME_PATTERN`).
SOURCE_DELIVERABLE_PATTERN = r"^[A-Za-z0-9_][-A-Za-z0-9._+]*$"
SOURCE_DELIVERABLE_MESSAGE = (
    "inputs[].artifact.deliverable must be the plain file name a deliverable was published under "
    "(letters, digits, '.', '_', '+' and '-', not starting with '.', no '/')"
)
SHA256_PATTERN = r"^[0-9a-f]{64}$"
SHA256_MESSAGE = "inputs[].artifact.sha256 must be a sha256 in hex (64 lowercase hex digits)"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_rule(field: str, pattern: str, message: str, optional: bool = False) -> JsonDict:
    test = f"self.{field}.matches({_cel_string(pattern)})"
    return {
        "rule": f"!has(self.{field}) || {test}" if optional else test,
        "message": message,
        "fieldPath": f".{field}",
    }


class ArtifactInput(ApiModel):
    """One proven deliverable of another session, copied into the workspace as
    `<target>/<deliverable>`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel_rule("session", SOURCE_SESSION_PATTERN, SOURCE_SESSION_MESSAGE),
                _cel_rule("deliverable", SOURCE_DELIVERABLE_PATTERN, SOURCE_DELIVERABLE_MESSAGE),
                _cel_rule("sha256", SHA256_PATTERN, SHA256_MESSAGE, optional=True),
            ]
        }
    )

    session: str = Field(min_length=1, max_length=63)
    deliverable: str = Field(min_length=1, max_length=128)
    sha256: str | None = Field(default=None, max_length=64)

    @field_validator("session")
    @classmethod
    def _same_namespace(cls, session: str) -> str:
        if not re.fullmatch(SOURCE_SESSION_PATTERN, session):
            raise ValueError(SOURCE_SESSION_MESSAGE)
        return session

    @field_validator("deliverable")
    @classmethod
    def _plain_name(cls, deliverable: str) -> str:
        if not re.fullmatch(SOURCE_DELIVERABLE_PATTERN, deliverable):
            raise ValueError(SOURCE_DELIVERABLE_MESSAGE)
        return deliverable

    @field_validator("sha256")
    @classmethod
    def _hex(cls, sha256: str | None) -> str | None:
        if sha256 is not None and not re.fullmatch(SHA256_PATTERN, sha256):
            raise ValueError(SHA256_MESSAGE)
        return sha256

    def shown(self) -> str:
        """How a line names it: the session and the deliverable."""
        return f"deliverable {self.deliverable} of session {self.session}"
