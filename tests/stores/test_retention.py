"""Which blobs a deleted session takes with it: only those no other record refers to."""

from __future__ import annotations

from belay.journal.events import (
    ARTIFACT_ARGUMENT,
    Artifact,
    ArtifactRef,
    Checkpoint,
    DeclaredArtifact,
    DerivedFrom,
    EffectClass,
    Event,
    Note,
    NoteKind,
    ToolRequest,
    ToolResult,
    UserInput,
    Verification,
)
from belay.stores.base import MANIFEST_MEDIA_TYPE
from belay.stores.retention import (
    References,
    blobs_only_of,
    expanded,
    references,
)
from tests.journal.fixtures import LogBuilder


def h(label: str) -> str:
    return (label.encode().hex() * 64)[:64]


def ref(label: str, media_type: str = "application/octet-stream") -> ArtifactRef:
    return ArtifactRef(sha256=h(label), size=1, media_type=media_type)


def entry(label: str) -> DeclaredArtifact:
    return DeclaredArtifact(name=f"{label}.txt", sha256=h(label), size=1)


def record(session: str, *payloads: object) -> list[Event]:
    log = LogBuilder(session)
    log.add(UserInput(goal="g"))
    for payload in payloads:
        log.add(payload)  # type: ignore[arg-type]
    return log.events


def test_every_reference_an_event_can_hold_is_found() -> None:
    events = record(
        "s",
        ToolRequest(
            operation_id="op",
            tool="write_file",
            arguments={"path": "a.py", "content": {ARTIFACT_ARGUMENT: h("argument"), "size": 1}},
            effect=EffectClass.IDEMPOTENT,
        ),
        ToolResult(
            operation_id="op",
            ok=True,
            output_ref=ref("output"),
            derived_from=DerivedFrom(artifacts=(h("up1"),)),
        ),
        Artifact(name="fix.patch", ref=ref("deliverable"), derived_from=DerivedFrom(artifacts=(h("up2"),))),
        Checkpoint(
            checkpoint_id="c",
            covers_seq=1,
            patch=ref("patch"),
            declared_artifacts=(entry("declared"),),
            verification=Verification(command="true", status="passed", output_sha256=h("stdout")),
        ),
        Note(note_id="n", kind=NoteKind.FINDING, text="t", derived_from=DerivedFrom(artifacts=(h("up3"),))),
        Artifact(name="bundle", ref=ref("manifest", MANIFEST_MEDIA_TYPE)),
    )
    found = references(events)
    labels = ["argument", "output", "up1", "deliverable", "up2", "patch", "declared", "up3", "manifest"]
    assert found.blobs == {h(label) for label in labels}
    assert found.manifests == {h("manifest")}
    assert h("stdout") not in found.blobs  # a hash of the output, never stored as a blob


def test_blobs_another_record_refers_to_stay() -> None:
    deleted = references(
        record(
            "doomed",
            Artifact(name="own", ref=ref("own")),
            Artifact(name="shared", ref=ref("shared")),
            Checkpoint(checkpoint_id="c", covers_seq=1, declared_artifacts=(entry("input"),)),
        )
    )
    other = references(
        record("other", Checkpoint(checkpoint_id="c", covers_seq=1, declared_artifacts=(entry("shared"),)))
    )
    # A fork's copy refers to its source's blobs, so the source's own input stays too.
    fork = references(
        record("fork", Checkpoint(checkpoint_id="c", covers_seq=1, declared_artifacts=(entry("input"),)))
    )
    assert blobs_only_of(deleted, [other, fork], {}) == {h("own")}
    assert blobs_only_of(deleted, [], {}) == {h("own"), h("shared"), h("input")}


def test_a_manifest_refers_to_its_entries() -> None:
    manifests = {h("manifest"): [entry("in-manifest"), entry("also-elsewhere")]}
    deleted = references(record("doomed", Artifact(name="bundle", ref=ref("manifest", MANIFEST_MEDIA_TYPE))))
    other = references(record("other", Artifact(name="x", ref=ref("also-elsewhere"))))
    assert blobs_only_of(deleted, [other], manifests) == {h("manifest"), h("in-manifest")}
    assert expanded(deleted, manifests) == {h("manifest"), h("in-manifest"), h("also-elsewhere")}
    # Another record holding the same manifest keeps the manifest and every entry.
    keeps_manifest = References(frozenset({h("manifest")}), frozenset({h("manifest")}))
    assert blobs_only_of(deleted, [keeps_manifest], manifests) == frozenset()
