"""`amend`: the request after a change asked on the command line, or refused with what to do.

The same for `belay amend` (which records the next request version as a scope change) and `kubectl
belay amend` (which edits `spec.request`, recorded by the operator as the same scope change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from belay.api.agentsession import ManifestError, load_manifest
from belay.cli.core.errors import CommandError
from belay.harness.children import Reopening
from belay.journal.state import SessionState


@dataclass(frozen=True)
class Request:
    goal: str
    parts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Amendment:
    """The request after the change, and what changed from the one before."""

    request: Request
    changed_parts: dict[str, str]  # set or changed, with their new text
    removed_parts: tuple[str, ...]
    goal_changed: bool

    @property
    def touched(self) -> list[str]:
        """What changed, in words: the goal first, then each part set, then each part removed."""
        return (["goal"] if self.goal_changed else []) + sorted(self.changed_parts) + list(self.removed_parts)


def manifest_request(path: Path) -> Request:
    """`spec.request` of a manifest, validated as the API validates it."""
    try:
        request = load_manifest(path).spec.request
    except ManifestError as error:
        raise CommandError(f"bad manifest: {error}") from None
    return Request(goal=request.goal, parts=dict(request.parts))


def amend(
    current: Request,
    version: int,
    *,
    goal: str | None = None,
    parts: Sequence[str] = (),
    removed: Sequence[str] = (),
    manifest: Path | None = None,
) -> Amendment:
    """The request version `version` changed by `--goal`, `--part KEY=VALUE` and `--remove-part
    KEY`, or replaced by the request of `-f MANIFEST`; refused when malformed or when it changes
    nothing."""
    new_goal, new_parts = current.goal, dict(current.parts)
    if manifest is not None:
        if goal is not None or parts or removed:
            raise CommandError("give either -f MANIFEST or --goal/--part/--remove-part, not both")
        taken = manifest_request(manifest)
        new_goal, new_parts = taken.goal, dict(taken.parts)
    if goal is not None:
        if not goal.strip():
            raise CommandError("--goal cannot be empty")
        new_goal = goal
    for item in parts:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--part {item!r}: expected KEY=VALUE")
        new_parts[key.strip()] = value
    for key in removed:
        if key not in new_parts:
            known = ", ".join(sorted(new_parts)) or "none"
            raise CommandError(f"--remove-part {key!r}: the request has no such part (parts: {known})")
        del new_parts[key]
    changed = {k: v for k, v in new_parts.items() if current.parts.get(k) != v}
    dropped = tuple(sorted(k for k in current.parts if k not in new_parts))
    if not (changed or dropped or new_goal != current.goal):
        raise CommandError(f"nothing changes: this is request v{version} as it stands")
    return Amendment(
        request=Request(goal=new_goal, parts=new_parts),
        changed_parts=changed,
        removed_parts=dropped,
        goal_changed=new_goal != current.goal,
    )


def children_reopened(state: SessionState, reopened: Sequence[Reopening], touched: Sequence[str]) -> str:
    """What an amend of a coordinator did to its children, in one line: those it reopened (a
    child's request is its part of this request: the same rule by which a change reopens the
    steps that depend on what it touched), and those that stand; or, plainly, that none depends
    on what changed."""
    again = {r.child for r in reopened}
    standing = ", ".join(
        f"{name} (part {link.part})" for name, link in sorted(state.children.items()) if name not in again
    )
    if again:
        named = ", ".join(f"{r.child} (part {r.link.part})" for r in reopened)
        return f"child sessions reopened: {named}; " + (
            f"the other children stand: {standing}" if standing else "no other child"
        )
    return (
        f"no child session depends on what changed ({', '.join(touched)}): a child's request is its own goal "
        f"and its part of this request, so every child stands: {standing}"
    )
