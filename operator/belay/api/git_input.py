"""An input taken from a git repository at one commit (`inputs[].git`), as a pydantic model.

The revision is a full commit id, never a branch or a tag: a ref moves, and the inputs' bytes must
be the same whenever they are read. The URL carries no credentials, since the manifest is recorded
and shown: a repository that needs them names a Secret of the session's namespace instead
(`credentialsSecret`, its `username` and `password` keys), which only the harness pod mounts.
Each rule is written as a CEL rule for the apiserver and as the pydantic validator `belay run`
runs, with one message for both, as in `belay.api.agentsession`.
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, field_validator, model_validator

from belay.api.base import ApiModel

GIT_SCHEMES = ("https", "http", "git", "file")
# A host (no user information: no '@' before the path) for https, http and git; an absolute path
# for file. No whitespace or control character anywhere.
GIT_URL_PATTERN = r"^((https?|git)://[^/?#@\s]+(/[^\s]*)?|file:///[^\s]*)$"
GIT_URL_MESSAGE = "inputs[].git.url must be an https://, http://, git:// or file:/// URL (no other transport)"
# user:password@host, or a token as the user: whatever precedes '@' in the authority.
GIT_URL_CREDENTIALS_PATTERN = r"^[a-zA-Z][-a-zA-Z0-9+.]*://[^/?#]*@"
GIT_URL_CREDENTIALS_MESSAGE = (
    "inputs[].git.url must not hold credentials (user:password@host): the manifest is recorded and "
    "shown; name a Secret of the session's namespace in inputs[].git.credentialsSecret"
)
GIT_REVISION_PATTERN = r"^[0-9a-f]{40}$"
GIT_REVISION_MESSAGE = (
    "inputs[].git.revision must be a full commit id (40 lowercase hex digits), never a branch or a "
    "tag: a ref moves, and a restore must read the same files"
)
GIT_CREDENTIALS_SCHEME_MESSAGE = "inputs[].git.credentialsSecret applies only to https:// and http:// URLs"
# A Kubernetes object name (RFC 1123 subdomain): a name in the session's own namespace, never a
# namespace/name pair.
GIT_SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def refused_url(url: str) -> str | None:
    """Why a git URL is refused, or None."""
    if re.match(GIT_URL_CREDENTIALS_PATTERN, url):
        return GIT_URL_CREDENTIALS_MESSAGE
    if not re.fullmatch(GIT_URL_PATTERN, url):
        return GIT_URL_MESSAGE
    return None


class GitInput(ApiModel):
    """A repository's tree at one commit, fetched by the harness and copied into the workspace."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!self.url.matches({_cel_string(GIT_URL_CREDENTIALS_PATTERN)})",
                    "message": GIT_URL_CREDENTIALS_MESSAGE,
                    "fieldPath": ".url",
                },
                {
                    "rule": f"self.url.matches({_cel_string(GIT_URL_CREDENTIALS_PATTERN)}) || "
                    f"self.url.matches({_cel_string(GIT_URL_PATTERN)})",
                    "message": GIT_URL_MESSAGE,
                    "fieldPath": ".url",
                },
                {
                    "rule": f"self.revision.matches({_cel_string(GIT_REVISION_PATTERN)})",
                    "message": GIT_REVISION_MESSAGE,
                    "fieldPath": ".revision",
                },
                {
                    "rule": "!has(self.credentialsSecret) || self.url.startsWith('https://') || "
                    "self.url.startsWith('http://')",
                    "message": GIT_CREDENTIALS_SCHEME_MESSAGE,
                    "fieldPath": ".credentialsSecret",
                },
            ]
        }
    )

    url: str = Field(min_length=1, max_length=2048)
    revision: str = Field(min_length=1, max_length=64)
    # The name of a Secret in the session's own namespace whose `username` and `password` keys
    # (a token as the password) authenticate the fetch; mounted into the harness pod only.
    credentials_secret: str | None = Field(default=None, pattern=GIT_SECRET_NAME_PATTERN, max_length=253)

    @field_validator("url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        refusal = refused_url(url)
        if refusal is not None:
            raise ValueError(refusal)
        return url

    @field_validator("revision")
    @classmethod
    def _full_commit_id(cls, revision: str) -> str:
        if not re.fullmatch(GIT_REVISION_PATTERN, revision):
            raise ValueError(GIT_REVISION_MESSAGE)
        return revision

    @model_validator(mode="after")
    def _credentials_over_http(self) -> GitInput:
        if self.credentials_secret is not None and not self.url.startswith(("https://", "http://")):
            raise ValueError(GIT_CREDENTIALS_SCHEME_MESSAGE)
        return self
