"""A YAML alias bomb (nine levels of nine aliases: some 660 bytes that stand for 9^9 lists) handed to
Belay as a manifest or a plan is refused as it is read, in well under a second and without the
memory its expansion would take; aliases within the bound still load."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from belay.api.bounded_yaml import MAX_ALIAS_NODES, load_yaml
from tests.belay_cli import run_belay

LEVELS = 9


def alias_bomb() -> str:
    """A manifest whose spec is nine levels of nine aliases of the level below."""
    lines = [
        "apiVersion: belay.dev/v1alpha1",
        "kind: AgentSession",
        "metadata: {name: bomb}",
        "spec:",
        '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
    ]
    for level in range(1, LEVELS + 1):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


# In a process of its own: the time and the peak memory of reading the file, and what it raised.
MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    from pathlib import Path
    from belay.api.agentsession import ManifestError, load_manifest
    from belay.harness.models.scripted import PlanError, parse_plan

    path, kind = Path(sys.argv[1]), sys.argv[2]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    try:
        load_manifest(path) if kind == "manifest" else parse_plan(path.read_bytes(), source=str(path))
        refusal = None
    except (ManifestError, PlanError) as error:
        refusal = str(error)
    seconds = time.monotonic() - started
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"seconds": seconds, "grown_kib": grown_kib, "refusal": refusal}))
    """
)
# Far below the gigabytes the expansion takes; above what reading any file of a few KiB takes.
MAX_GROWTH_KIB = 32 * 1024
# A process that expands the bomb is stopped long before it could: its address space is capped.
MEMORY_CAP = 'ulimit -v 2000000; exec "$@"'


@pytest.mark.parametrize("kind", ["manifest", "plan"])
def test_an_alias_bomb_is_refused_at_once_with_bounded_memory(tmp_path: Path, kind: str) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_bytes()) < 700
    measured = subprocess.run(
        ["sh", "-c", MEMORY_CAP, "sh", sys.executable, "-c", MEASURE, str(bomb), kind],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert measured.returncode == 0, measured.stderr[-2000:]
    result = json.loads(measured.stdout)
    assert result["refusal"] is not None and "aliases would expand it by" in result["refusal"]
    assert result["seconds"] < 1.0, result
    assert result["grown_kib"] < MAX_GROWTH_KIB, result


def test_belay_run_refuses_the_bomb_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    home = tmp_path / "home"
    result = run_belay(home, "run", str(bomb), timeout=30)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: bad manifest: ") and "aliases would expand it by" in lines[0]
    assert not (home / "sessions").exists()


def test_aliases_within_the_bound_still_load_and_one_inside_itself_is_refused() -> None:
    shared = (
        "defaults: &defaults {isolation: required, networkProfile: none}\none: *defaults\ntwo: *defaults\n"
    )
    assert load_yaml(shared)["two"] == {"isolation": "required", "networkProfile": "none"}
    big = "a: &a [" + ", ".join(["x"] * (MAX_ALIAS_NODES - 1)) + "]\nb: *a\n"
    assert len(load_yaml(big)["b"]) == MAX_ALIAS_NODES - 1  # adds MAX_ALIAS_NODES nodes: allowed
    with pytest.raises(yaml.YAMLError, match="aliases would expand it by"):
        load_yaml(big + "c: *a\n")
    with pytest.raises(yaml.YAMLError, match="anchor it is inside of"):
        load_yaml("a: &a [1, *a]\n")
