"""What the operator refuses to run, as pure functions of a session's spec and its settings.

The API refuses what it can tell from the manifest alone (an image reference where a name is
wanted, a malformed address). What depends on the operator's settings, or on what a NetworkPolicy
can express, is refused here, before anything of the session is created: its status says why
(Stalled, reason NotAllowed) and no pod, Secret, Service or policy is made, no record written.

- Images: a session names one of the images the chart allows (`sessions.harnessImages`,
  `sessions.sandboxImages`), or runs the default; a name not listed is refused, so whoever may
  create a session cannot run code of their choosing in a pod that holds the fleet's credentials.
- RuntimeClasses: a subagent may name one the chart allows, never a weaker one of its choosing.
- Stores: a session uses the operator's stores (with the operator's credentials), or names its
  own (`spec.stores.events` and `.artifacts`, etcd and S3) with the Secret of its namespace whose
  credentials reach them (`spec.stores.secretRef`): the operator opens them with that Secret's
  credentials only, and the harness gets that Secret alone. Never a mix, never a file path (it
  would name the operator's own disk).
- Allowlists: a NetworkPolicy names addresses, not host names, so a host name is refused (it
  would otherwise open nothing without a word); a range wider than profile `internet` (one that
  holds or meets a special-purpose range, such as `0.0.0.0/0` holding the cluster's private
  ranges) is refused rather than cut down.

- Tool servers: a subagent's MCP tool servers (`toolServers`) are refused: they run on the
  embedded runtime only, so far.

Artifact inputs (`inputs[].artifact`) are not refused here: whether one may be taken depends on its
source's record, read before the first harness pod (`belay.controller.artifact_inputs`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from belay.api.agentsession import AgentSessionSpec, SubagentSpec
from belay.controller.settings import OperatorSettings
from belay.sandbox.egress import wider_than_internet


def _allowed(names: dict[str, str]) -> str:
    return ", ".join(sorted(names)) if names else "none: only the default"


def harness_image(spec: AgentSessionSpec, settings: OperatorSettings) -> str:
    """The image reference of the session's harness pods. KeyError for a name not allowed
    (`refusals` says so first)."""
    name = spec.executor.image
    return settings.harness_image if name is None else settings.harness_images[name]


def sandbox_image(subagent: SubagentSpec, settings: OperatorSettings) -> str:
    """The image reference of the subagent's sandbox pods. KeyError for a name not allowed."""
    name = subagent.image
    return settings.sandbox_image if name is None else settings.sandbox_images[name]


def runtime_class(subagent: SubagentSpec, settings: OperatorSettings) -> str | None:
    """The RuntimeClass of the subagent's sandbox pods: its own (one the operator allows), else
    the operator's for its network profile, else the operator's default (None: the node's)."""
    return (
        subagent.runtime_class_name
        or settings.sandbox_runtime_classes.get(subagent.network_profile)
        or settings.sandbox_runtime_class
    )


def own_stores(spec: AgentSessionSpec) -> bool:
    """Whether the session names stores of its own instead of the operator's."""
    stores = spec.stores
    return any(value is not None for value in (stores.events, stores.artifacts, stores.secret_ref))


OWN_STORES_MESSAGE = (
    "spec.stores: a session's own stores in a cluster are named together: events (etcd://), "
    "artifacts (s3://) and secretRef, the Secret of the session's namespace with their "
    "credentials (the operator's own credentials never open a store a session names)"
)


def store_refusals(spec: AgentSessionSpec) -> list[str]:
    if not own_stores(spec):
        return []
    stores = spec.stores
    if stores.events is None or stores.artifacts is None or stores.secret_ref is None:
        return [OWN_STORES_MESSAGE]
    found = []
    events, artifacts = urlsplit(stores.events), urlsplit(stores.artifacts)
    if events.scheme != "etcd" or artifacts.scheme != "s3":
        found.append(f"{OWN_STORES_MESSAGE}; a sqlite:// or file:// URL would name the operator's own disk")
    if events.query:
        found.append(
            "spec.stores.events: a session's own etcd takes no options (segments of its own are not "
            "supported in a cluster)"
        )
    return found


# The keys of a session's store Secret the operator reads: those the harness reads as its
# environment (the AWS SDK's and the record key's).
RECORD_KEY_VARIABLE = "BELAY_RECORD_KEY"


def own_store_specs(spec: AgentSessionSpec, data: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The event and artifact store specs the operator opens a session's own stores with, from the
    keys of the session's Secret and nothing else: no credential, endpoint or record key of the
    operator's own environment reaches them. ValueError when the Secret lacks what S3 needs."""
    stores = spec.stores
    assert stores.events is not None and stores.artifacts is not None
    missing = [key for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not data.get(key)]
    if missing:
        raise ValueError(
            f"the Secret {stores.secret_ref} named by spec.stores.secretRef has no {' or '.join(missing)}"
        )
    region = data.get("AWS_REGION") or data.get("AWS_DEFAULT_REGION") or "us-east-1"
    # Named, so the SDK never takes the operator's own endpoint setting instead.
    endpoint = (
        data.get("AWS_ENDPOINT_URL_S3")
        or data.get("AWS_ENDPOINT_URL")
        or f"https://s3.{region}.amazonaws.com"
    )
    events = {"backend": "etcd", "url": stores.events, "record_key": data.get(RECORD_KEY_VARIABLE, "")}
    artifacts = {
        "backend": "s3",
        "url": stores.artifacts,
        "access_key": data["AWS_ACCESS_KEY_ID"],
        "secret_key": data["AWS_SECRET_ACCESS_KEY"],
        "endpoint_url": endpoint,
        "region": region,
    }
    return events, artifacts


def allowlist_refusals(entries: list[str]) -> list[str]:
    """Why each allowlist entry cannot be a sandbox pod's egress rule."""
    refused = []
    for entry in entries:
        try:
            network = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            refused.append(
                f"{entry!r} is not an address or range: a NetworkPolicy cannot name a host, so in "
                "a cluster an allowlist takes addresses and ranges only (resolve the host and list "
                "its addresses)"
            )
            continue
        why = wider_than_internet(network)
        if why is not None:
            refused.append(f"{entry!r} is wider than networkProfile 'internet': {why}")
    return refused


def refusals(spec: AgentSessionSpec, settings: OperatorSettings) -> list[str]:
    """Everything in the spec this operator will not run, one line each; empty: it runs."""
    found = store_refusals(spec)
    image = spec.executor.image
    if image is not None and image not in settings.harness_images:
        found.append(
            f"spec.executor.image: {image!r} is not a harness image this operator allows "
            f"(allowed: {_allowed(settings.harness_images)})"
        )
    runtime_classes = settings.runtime_classes()
    for sub in spec.subagents:
        where = f"spec.subagents[{sub.name}]"
        if sub.image is not None and sub.image not in settings.sandbox_images:
            found.append(
                f"{where}.image: {sub.image!r} is not a sandbox image this operator allows "
                f"(allowed: {_allowed(settings.sandbox_images)})"
            )
        if sub.runtime_class_name is not None and sub.runtime_class_name not in runtime_classes:
            allowed = ", ".join(sorted(runtime_classes)) or "none"
            found.append(
                f"{where}.runtimeClassName: {sub.runtime_class_name!r} is not a RuntimeClass this "
                f"operator allows (allowed: {allowed})"
            )
        found += [f"{where}.allowlist: {why}" for why in allowlist_refusals(sub.allowlist)]
        if sub.tool_servers:
            found.append(TOOL_SERVERS_MESSAGE.format(where=where))
    return found


# A subagent's MCP tool servers run on the embedded runtime; a sandbox pod's image is not known to
# hold their commands or the SDK, and no test has run them on a node.
TOOL_SERVERS_MESSAGE = (
    "{where}.toolServers: MCP tool servers run with `belay run` only; in a cluster they are not built yet"
)
