"""`artifacts`: the table of a session's artifacts, and where `artifacts get` writes one.

Locally every artifact the record names is listed, with where it lives in the home's store; in a
cluster the deliverables the status publishes, with the short-lived URL the operator renews. The
same table either way, and the same refusals: a blob the session does not name, a name that is no
plain file name without `-o PATH`, an output that cannot be written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from belay.api.agentsession import is_plain_file_name
from belay.cli.core.errors import CommandError
from belay.journal.state import SessionState
from belay.views.briefing.classify import ready_for_review
from belay.views.fleet.render import columns
from belay.views.status.model import SessionStatus

HASH_PREFIX = "sha256:"


@dataclass(frozen=True)
class ArtifactRow:
    name: str
    subagent: str
    size: int
    sha256: str
    deliverable: bool
    ready_for_review: bool
    location: str  # a path, a URL, or "(missing)" where the store lost it


def rows_of_state(state: SessionState, location: Mapping[str, str]) -> list[ArtifactRow]:
    """Every artifact of the record, in the order published; `location` by sha256 (absent: the
    store no longer has it)."""
    reviews = ready_for_review(state)
    return [
        ArtifactRow(
            name=record.name,
            subagent=record.subagent or "",
            size=record.ref.size,
            sha256=record.ref.sha256,
            deliverable=record.deliverable,
            ready_for_review=record.name in reviews,
            location=location.get(record.ref.sha256, "(missing)"),
        )
        for record in sorted(state.artifacts.values(), key=lambda r: r.seq)
    ]


def rows_of_status(status: SessionStatus) -> list[ArtifactRow]:
    """The deliverables a status publishes."""
    return [
        ArtifactRow(
            name=d.name,
            subagent=d.subagent or "",
            size=d.size,
            sha256=d.sha256,
            deliverable=True,
            ready_for_review=d.ready_for_review,
            location=d.location,
        )
        for d in status.deliverables
    ]


def render_rows(session: str, rows: Sequence[ArtifactRow]) -> str:
    if not rows:
        return f"{session} has published no artifact yet"
    header = ["NAME", "SUBAGENT", "SIZE", "SHA256", "DELIVERABLE", "REVIEW", "LOCATION"]
    cells = [
        [
            row.name,
            row.subagent or "-",
            str(row.size),
            row.sha256,
            "yes" if row.deliverable else "-",
            "yes" if row.ready_for_review else "-",
            row.location,
        ]
        for row in rows
    ]
    return columns(header, cells)


def render_json(rows: Sequence[ArtifactRow]) -> str:
    """The rows as a JSON list (`artifacts --json`): every field of each, in full."""
    return json.dumps([asdict(row) for row in rows], indent=2)


def render(session: str, rows: Sequence[ArtifactRow], as_json: bool) -> str:
    return render_json(rows) if as_json else render_rows(session, rows)


def blobs_named(state: SessionState) -> set[str]:
    """Every blob the session's record refers to: artifacts, what approvals bind, checkpoint
    patches and declared files."""
    named = {record.ref.sha256 for record in state.artifacts.values()}
    for approval in state.approvals.values():
        named.update(ref.sha256 for ref in (approval.payload_ref, approval.content_ref) if ref is not None)
    for checkpoints in state.subagent_checkpoints.values():
        for record in checkpoints:
            if record.checkpoint.patch is not None:
                named.add(record.checkpoint.patch.sha256)
            named.update(entry.sha256 for entry in record.checkpoint.declared_artifacts)
            if record.checkpoint.declared_manifest is not None:
                named.add(record.checkpoint.declared_manifest.sha256)
    return named


def blobs_of_status(status: SessionStatus) -> set[str]:
    """The blobs a status gives a URL for: deliverables, and what pending approvals bind."""
    named = {d.sha256 for d in status.deliverables}
    for approval in status.pending_approvals:
        if approval.payload_location:
            named.add(approval.payload_sha256)
        if approval.content_sha256 and approval.content_location:
            named.add(approval.content_sha256)
    return named


@dataclass(frozen=True)
class Download:
    sha256: str
    target: Path


def download(
    session: str, name: str, output: Path | None, *, artifacts: Mapping[str, str], blobs: set[str]
) -> Download:
    """What `artifacts get SESSION NAME [-o PATH]` fetches and where it writes it: an artifact by
    name (`artifacts`: name -> sha256), or any blob the session names by `sha256:HASH`."""
    if name.startswith(HASH_PREFIX):
        sha256 = name.removeprefix(HASH_PREFIX)
        if sha256 not in blobs:
            raise CommandError(
                f"session {session} names no blob {HASH_PREFIX}{sha256} (its artifacts, approval payloads "
                "and checkpoint patches can be fetched by hash)"
            )
        return Download(sha256, output or Path(sha256))
    if name not in artifacts:
        known = ", ".join(sorted(artifacts)) or "none"
        raise CommandError(f"session {session} has no artifact {name!r} (artifacts: {known})")
    if output is None and not is_plain_file_name(name):
        # A name chosen by a model may be `../../x` or `/abs/x`: only -o says where to write it.
        raise CommandError(
            f"artifact {name!r} is not a plain file name, so it is not written into the working "
            "directory by its name: choose where with -o PATH"
        )
    return Download(artifacts[name], output or Path(name))


def write_output(target: Path, data: bytes) -> None:
    """Writes what a command was asked for with -o (or its default place)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as error:
        raise CommandError(
            f"cannot write {target}: {error.strerror or error}; choose another -o PATH"
        ) from None
