"""Names and labels of the objects the operator owns for a session.

Object names are derived, never stored: the same session and attempt always give the same names,
so a restarted operator finds what it created. Names that could exceed a DNS label are shortened
with a hash of the full name, so two long names never collide.
"""

from __future__ import annotations

import hashlib
import re

GROUP = "belay.dev"
API_VERSION = f"{GROUP}/v1alpha1"
FIELD_MANAGER = "belay-operator"
FINALIZER = f"{GROUP}/pods-and-retention"

LABEL_SESSION = f"{GROUP}/session"
LABEL_COMPONENT = f"{GROUP}/component"
LABEL_SUBAGENT = f"{GROUP}/subagent"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_REPLACEMENT = f"{GROUP}/replacement"
# A pool pod's sandbox template (docs/operator.md#the-sandbox-pool); a claimed pod keeps it.
LABEL_TEMPLATE = f"{GROUP}/template"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# `kubectl belay events` asks for the record with "<from seq>/<nonce>"; the status answers it.
ANNOTATION_EVENTS_REQUEST = f"{GROUP}/events-request"
# `kubectl belay drill` asks for a drill with {"nonce", "points"}; the copy carries its points.
ANNOTATION_DRILL_REQUEST = f"{GROUP}/drill-request"
ANNOTATION_FAULT_POINTS = f"{GROUP}/fault-points"
MANAGED_BY = "belay-operator"

COMPONENT_HARNESS = "harness"
COMPONENT_SANDBOX = "sandbox"
# An idle sandbox pod of the pool: no session's, until a claim makes it one's `sandbox`.
COMPONENT_POOL = "sandbox-pool"
POOL_POLICY = "belay-sandbox-pool"

DNS_LABEL_MAX = 63
_HASH_CHARS = 8


def dns_label(*parts: str) -> str:
    """A DNS-1035 label from parts: lowercase, starts with a letter, at most 63 characters."""
    full = "-".join(parts)
    cleaned = re.sub(r"[^a-z0-9-]+", "-", full.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"b-{cleaned}"
    if len(cleaned) <= DNS_LABEL_MAX and cleaned == full:
        return cleaned
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_CHARS]
    head = cleaned[: DNS_LABEL_MAX - _HASH_CHARS - 1].rstrip("-")
    return f"{head}-{digest}"


def record_id(namespace: str, name: str) -> str:
    """The id of an AgentSession's record in the event store, from its namespace and name: two
    sessions of one name in two namespaces never share a record. Neither part can hold a '/' (both
    are DNS labels), so one id names one session, and none is a bare name (a record's id before
    records were keyed by namespace, `belay.controller.ownership.move_legacy_record`)."""
    return f"{namespace}/{name}"


def harness_pod_name(session: str, index: int) -> str:
    return dns_label(session, "harness", str(index))


def sandbox_pod_name(session: str, subagent: str, index: int, replacement: int = 0) -> str:
    """A replacement for a lost sandbox pod gets a name of its own (`-r<n>`): the lost pod may
    still be terminating under the old name."""
    if replacement == 0:
        return dns_label(session, "sbx", subagent, str(index))
    return dns_label(session, "sbx", subagent, str(index), f"r{replacement}")


def sandbox_service_name(session: str, subagent: str) -> str:
    return dns_label("sbx", session, subagent)


def sandbox_token_secret_name(session: str, subagent: str, uid: str) -> str:
    """Each subagent's sandbox has a token of its own, in a Secret of its own. The name carries
    the AgentSession's uid: a session deleted and created again under the same name gets Secrets
    of its own, rather than finding the old ones (owned by the deleted session, so the garbage
    collector removes them under the new session's pods)."""
    return dns_label(session, "sbx", subagent, "token", uid[:8])


def pool_pod_name(template: str, suffix: str) -> str:
    return dns_label("belay-pool", template, suffix)


def claim_key_secret_name(pool_pod: str) -> str:
    """The Secret holding a pool pod's one-time claim key; the harness that claims it mounts it."""
    return dns_label(pool_pod, "claim")


def pool_selector(template: str | None = None) -> dict[str, str]:
    selector = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_POOL}
    if template is not None:
        selector[LABEL_TEMPLATE] = template
    return selector


def checkpoint_object_name(session: str, seq: int) -> str:
    return dns_label(session, "cp", str(seq))


def session_labels(session: str) -> dict[str, str]:
    return {LABEL_SESSION: session, LABEL_MANAGED_BY: MANAGED_BY}


def harness_selector(session: str) -> dict[str, str]:
    return {LABEL_SESSION: session, LABEL_COMPONENT: COMPONENT_HARNESS}


def sandbox_selector(session: str, subagent: str | None = None) -> dict[str, str]:
    selector = {LABEL_SESSION: session, LABEL_COMPONENT: COMPONENT_SANDBOX}
    if subagent is not None:
        selector[LABEL_SUBAGENT] = subagent
    return selector


def harness_holder(pod_name: str) -> str:
    """The fencing-lease holder name the harness in a pod takes: the operator compares it with the
    pod it sees, to tell whose lease renewals stopped."""
    return f"pod:{pod_name}"
