"""Static checks of harness-image/Dockerfile: the base is a build argument, the image runs as a
numeric non-root user, and its command is the module the operator's harness pods run."""

from __future__ import annotations

import importlib.util
import json
import re

from belay.controller.desired import HARNESS_MODULE
from belay.controller.settings import OperatorSettings
from tests.api.kubehelpers import REPO_ROOT

DOCKERFILE = (REPO_ROOT / "harness-image/Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    lines = [
        line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")
    ]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_base_image_is_a_build_argument_declared_before_from() -> None:
    steps = instructions()
    first_from = next(i for i, (op, _) in enumerate(steps) if op == "FROM")
    args_before = [value for op, value in steps[:first_from] if op == "ARG"]
    assert any(value.startswith("BASE_IMAGE=") for value in args_before)
    assert steps[first_from][1] == "${BASE_IMAGE}"


def test_runs_as_a_numeric_non_root_user() -> None:
    steps = instructions()
    uid = next(
        value.split("=", 1)[1] for op, value in steps if op == "ARG" and value.startswith("BELAY_UID=")
    )
    user = [value for op, value in steps if op == "USER"][-1]
    assert user == "${BELAY_UID}:${BELAY_UID}"
    assert uid.isdigit() and int(uid) != 0
    assert int(uid) == OperatorSettings().run_as_user  # the pods' runAsUser matches the image's user


def test_command_is_the_harness_pod_module() -> None:
    command = json.loads(next(value for op, value in instructions() if op == "CMD"))
    assert command == ["python", "-m", HARNESS_MODULE]
    assert importlib.util.find_spec(HARNESS_MODULE) is not None
