"""The mark on an effect's reference: made only with the key, bound to its session and operation,
and the key kept in a file of the home that only its owner can read."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from belay.harness.effect_marks import EffectKeyError, EffectMarks, key_in_file, names_operation

KEY = b"k" * 32


def test_a_reference_is_marked_for_its_session_and_operation_only() -> None:
    marks = EffectMarks(KEY, "demo")
    reference = marks.reference("filer.file.1")
    assert reference.startswith("filer.file.1~") and len(reference) == len("filer.file.1~") + 64
    assert marks.is_marked(reference, "filer.file.1")
    forged = [
        "filer.file.1",
        "filer.file.1~" + "0" * 64,
        reference.upper(),
        reference + "0",
        EffectMarks(KEY, "other").reference("filer.file.1"),  # another session's
        EffectMarks(b"x" * 32, "demo").reference("filer.file.1"),  # another key's
        "filer.file.1~" + marks.reference("filer.file.2").rsplit("~", 1)[1],  # another operation's mark
        None,
        42,
    ]
    for candidate in forged:
        assert not marks.is_marked(candidate, "filer.file.1"), candidate
    assert not marks.is_marked(reference, "filer.file.2")


def test_what_names_an_operation() -> None:
    assert names_operation("w.s.1", "w.s.1") and names_operation("w.s.1~anything", "w.s.1")
    for other in ["w.s.10", "w.s.10~x", "w.s.1x", "x.w.s.1", "", None]:
        assert not names_operation(other, "w.s.1"), other


def test_the_key_file_is_made_once_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "home" / "effect.key"
    previous = os.umask(0o022)
    try:
        with ThreadPoolExecutor(8) as pool:
            keys = set(pool.map(lambda _: key_in_file(path), range(16)))
    finally:
        os.umask(previous)
    assert len(keys) == 1 and len(keys.pop()) == 64
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["effect.key"]  # no temporary file left
    assert key_in_file(path) == path.read_bytes().strip()


def test_a_short_key_is_refused_with_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "effect.key"
    path.write_text("short\n")
    with pytest.raises(EffectKeyError, match=r"fewer than 32.*remove it"):
        key_in_file(path)
