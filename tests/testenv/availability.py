"""What a test does when a component it needs is not built: skip with the reason, except under CI,
where a skip would let the run pass without testing anything, so it fails instead."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NoReturn

import pytest

from tests.testenv.binaries import component
from tests.testenv.polling import WaitFailed, wait_until

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


# Set by `make test` (hack/run-tests.sh) while hack/build-all.sh runs beside the tests: the path of
# a file that the script writes the build's exit status to when it ends.
BUILDS_UNDER_WAY_ENV = "BELAY_BUILDS_UNDER_WAY"
BUILDS_WAIT_LIMIT_S = 3 * 3600  # a guard against a build that never ends, never a timing


def wait_for_builds_under_way(environ: Mapping[str, str] | None = None) -> None:
    """Returns once the builds that `make test` started beside the tests have ended (at once when
    none were started). Whether they built everything is for the test's own checks to find."""
    status_file = (os.environ if environ is None else environ).get(BUILDS_UNDER_WAY_ENV)
    if not status_file:
        return
    try:
        wait_until(
            Path(status_file).exists, "hack/build-all.sh to end", timeout=BUILDS_WAIT_LIMIT_S, interval=1
        )
    except WaitFailed as failed:
        pytest.fail(str(failed), pytrace=False)  # the one line says it all
