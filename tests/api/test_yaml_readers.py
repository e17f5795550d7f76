"""The C reader (libyaml) that reads a manifest or plan refuses what the pure-Python reader refuses,
in the same words: a key given twice (the same one first, in nested mappings), an alias inside its
own anchor, aliases past their bound, a second document, a syntax error; and both refuse a file
holding more nodes than Belay reads, or nested past its depth, instead of reading a million nodes
or following the nesting down the C stack (an older libyaml does, until the process dies)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from belay.api.bounded_yaml import (
    FAST_LOADER,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    describe_yaml_error,
    load_yaml,
)
from tests.security.test_alias_bomb import alias_bomb

REFUSED = {
    "key twice": "a: 1\nb: 2\na: 3\n",
    "inner key twice first": "a: 1\nb:\n  c: 1\n  c: 2\na: 3\n",
    "key twice beside a merge": "base: &b {x: 1}\nd:\n  <<: *b\n  y: 3\n  y: 4\n",
    "alias inside its anchor": "a: &x [1, *x]\n",
    "alias bomb": alias_bomb(),
    "two documents": "a: 1\n---\nb: 2\n",
    "syntax": "a: [1\nb: 2\n",
    "tab": "a:\n\tb: 1\n",
}


def refusal(text: str, *, fast: bool) -> str:
    with pytest.raises(yaml.YAMLError) as refused:
        load_yaml(text, fast=fast)
    return f"{type(refused.value).__name__}: {describe_yaml_error(refused.value)}"


def test_this_machine_has_the_c_reader() -> None:
    assert FAST_LOADER is not None  # else the tests below compare the pure-Python reader to itself


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_c_reader_refuses_as_the_pure_python_reader_does(case: str) -> None:
    assert refusal(REFUSED[case], fast=True) == refusal(REFUSED[case], fast=False)


def test_the_key_named_is_the_one_the_pure_python_reader_finds_first() -> None:
    words = refusal(REFUSED["inner key twice first"], fast=True)
    assert words.startswith("DuplicateKey: the key 'c' (first given at line 3)"), words


def test_both_readers_read_the_same_document() -> None:
    text = "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\nlist: [1, '1', 1.5, null, true, 2026-12-07]\n"
    assert load_yaml(text, fast=True) == load_yaml(text, fast=False) == yaml.safe_load(text)


@pytest.mark.parametrize("fast", [True, False])
def test_a_plan_of_more_nodes_than_belay_reads_is_refused_at_the_bound(fast: bool) -> None:
    nodes = (MAX_FILE_BYTES - 2) // 2  # the most a file under the cap holds
    words = refusal("[" + "0," * (nodes - 1) + "0]", fast=fast)
    assert words.startswith(f"TooManyNodes: it holds more than the {MAX_NODES} nodes"), words
    assert "\n" not in words
    at_the_bound = "[" + "0," * (MAX_NODES - 2) + "0]"  # the list is a node too
    assert len(load_yaml(at_the_bound, fast=fast)) == MAX_NODES - 1


# In a process of its own: an older libyaml would follow a deep nesting down the C stack and die.
DEEP = """
import sys, yaml
from belay.api.bounded_yaml import describe_yaml_error, load_yaml
depth = int(sys.argv[1])
try:
    load_yaml("[" * depth + "]" * depth, fast=sys.argv[2] == "fast")
    print("read")
except yaml.YAMLError as error:
    print(describe_yaml_error(error))
"""


@pytest.mark.parametrize("fast", ["fast", "pure"])
def test_a_nesting_past_the_depth_is_refused_and_within_it_read(fast: str) -> None:
    for depth, answer in ((200_000, "nested deeper than Belay reads"), (MAX_DEPTH, "read")):
        ran = subprocess.run(
            [sys.executable, "-c", DEEP, str(depth), fast], capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, (ran.returncode, ran.stderr[-2000:])
        assert ran.stdout.strip() == answer, ran.stdout
