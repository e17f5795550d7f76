"""What a test does when a component it needs is not built: skip with the reason, except under CI,
where a skip would let the run pass without testing anything, so it fails instead."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, NoReturn

import pytest

from tests.testenv.binaries import component

Outcome = Literal["skip", "fail"]


def outcome_when_missing(environ: Mapping[str, str]) -> Outcome:
    return "fail" if environ.get("CI", "").strip().lower() == "true" else "skip"


def unavailable(reason: str, environ: Mapping[str, str] | None = None) -> NoReturn:
    if outcome_when_missing(os.environ if environ is None else environ) == "fail":
        pytest.fail(f"CI=true and a required component is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def require_built(*names: str) -> None:
    """Skips (or under CI fails) the calling test unless every named component is built."""
    for name in names:
        reason = component(name).missing_reason()
        if reason:
            unavailable(reason)
