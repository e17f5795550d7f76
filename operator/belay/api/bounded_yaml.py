"""The files a person hands Belay (manifests, plans), read within bounds: only from a regular file
under MAX_FILE_BYTES, as YAML with no key given twice in one mapping and a bound on what its
aliases expand to.

A path is opened without blocking (a FIFO is refused, not waited on) and checked on the open
descriptor: a device (`/dev/zero`), a directory or a FIFO is refused before a byte is read, and at
most one byte past the cap is ever read, so a file that grows while it is read is refused too. The
cap is far above any manifest (Kubernetes keeps an object under 1.5 MiB) or plan, and below what
PyYAML parses in a few seconds.

A key given twice in one mapping is refused, naming it and both lines: YAML readers differ on
which one wins (PyYAML keeps the last), so a second `metadata:` would silently rename a session.
A merge key (`<<: *defaults`) is not a duplicate of what it merges: keys written beside it
override the merged ones, as YAML means them to.

PyYAML composes an alias as the very node its anchor names, so composing is cheap whatever the
aliases; what is not is everything after it that walks the document as a tree (turning YAML's
types into JSON's, validating it), which visits a node once for every path to it. Nine levels of
nine aliases are 661 bytes and 9^9 (387 million) paths: gigabytes and minutes before anything
could refuse them. So the composed graph is measured before anything is built from it: the
number of nodes the aliases add (every node counted once per path to it, less the nodes written
out) may be at most MAX_ALIAS_NODES, and an alias inside its own anchor (a document that never
ends as a tree) is refused. Aliases themselves stay allowed: a manifest may share a block
(`<<: *defaults`), as people write Kubernetes manifests.

The measure costs one pass over the nodes written out, however far the aliases would expand.

What is written out is bounded too, before it is composed: at most MAX_NODES nodes, nested at most
MAX_DEPTH deep, counted on the parser's events (which stop at the first node past the bound). A
file under the cap can hold a million nodes (`[0,0,0,...]`), which PyYAML's pure-Python reader
takes about 30 s to read; and the C reader (libyaml, `yaml.CSafeLoader`) composes a nesting by
recursing in C: the libyaml of the project's PyYAML wheel refuses past 1,000 levels itself, an
older one (a system's PyYAML) follows a 200,000-deep nesting down the C stack until the process
dies. Within the bounds the C reader parses and
composes (bench/bench_yaml.py measures both); the same two checks run on what it composed (a key
given twice, found in the order the pure-Python reader finds it; the aliases' growth). A document
the C reader refuses is read again by the pure-Python reader, which decides and words the refusal
as it always has. Without libyaml, the pure-Python reader does all of it, within the same bounds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, cast

import yaml

# What aliases may add to a document, in nodes; far above any block a manifest or plan shares.
MAX_ALIAS_NODES = 10_000
# The nodes a document may write out, and how deep it may nest them (see the module docstring):
# a plan or manifest of ordinary lines at the size cap holds about 100,000.
MAX_NODES = 200_000
MAX_DEPTH = 200
NESTED_TOO_DEEP = "nested deeper than Belay reads"
# The largest file a person hands Belay that it reads (see the module docstring).
MAX_FILE_BYTES = 2 * 1024 * 1024
MERGE_TAG = "tag:yaml.org,2002:merge"


class FileRefused(ValueError):
    """A path that is not a regular file under MAX_FILE_BYTES; the message leaves the path to
    the caller and quotes nothing of the file."""


def _kind(mode: int) -> str:
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")]
    kinds += [(stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    return next((name for test, name in kinds if test(mode)), "what is not a regular file")


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file at `path` (symlinks followed), or FileRefused: it cannot be
    opened, is no regular file (a FIFO is refused without waiting for a writer), or holds more
    than `limit` bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        raise FileRefused(f"cannot read: {error.strerror or error}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"cannot read {_kind(info.st_mode)}: Belay reads only from a regular file")
        data = b""
        if info.st_size <= limit:
            data = _read_at_most(descriptor, limit + 1)
    except OSError as error:
        raise FileRefused(f"cannot read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if info.st_size > limit or len(data) > limit:
        size = max(info.st_size, len(data))
        raise FileRefused(f"{size:,} bytes, more than the {limit:,} Belay reads from a manifest or plan")
    return data


def _read_at_most(descriptor: int, count: int) -> bytes:
    parts: list[bytes] = []
    left = count
    while left > 0:
        part = os.read(descriptor, min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


class DuplicateKey(yaml.MarkedYAMLError):
    """A key given twice in one mapping."""


def _shown_key(node: yaml.ScalarNode) -> str:
    text = str(node.value)
    return repr(text if len(text) <= 60 else text[:57] + "...")


class AliasesTooLarge(yaml.MarkedYAMLError):
    """Aliases that expand the document past MAX_ALIAS_NODES, or into itself."""


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(nodes with every alias expanded, nodes written out) of the graph under `root`, walked
    without recursion; AliasesTooLarge for an alias inside its own anchor."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise AliasesTooLarge(
                    problem="an alias refers to the anchor it is inside of (the document would never end)",
                    problem_mark=child.start_mark,
                )
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)], len(sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    first: dict[tuple[str, str], yaml.Node] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE_TAG:
            continue
        seen = first.setdefault((key.tag, str(key.value)), key)
        if seen is not key:
            raise DuplicateKey(
                problem=f"the key {_shown_key(key)} (first given at line {seen.start_mark.line + 1}) "
                "is given again in the same mapping",
                problem_mark=key.start_mark,
            )


def _refuse_duplicates_composed(root: yaml.Node) -> None:
    """Each mapping of a composed graph checked once, in the order the pure-Python composer
    finishes them (an inner mapping before the one holding it, earlier before later)."""
    entered: set[int] = set()  # an alias inside its own anchor leads back to an entered node
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            if isinstance(node, yaml.MappingNode):
                _refuse_duplicate_keys(node)
            continue
        if id(node) in entered:
            continue
        entered.add(id(node))
        stack.append((node, True))
        # Scalars hold no mapping: only collections are walked.
        stack.extend(
            (child, False)
            for child in reversed(_children(node))
            if not isinstance(child, yaml.ScalarNode) and id(child) not in entered
        )


def _refuse_aliases_too_large(node: yaml.Node) -> None:
    expanded, written = _expanded_size(node)
    if expanded - written > MAX_ALIAS_NODES:
        raise AliasesTooLarge(
            problem=f"its aliases would expand it by {expanded - written} nodes, more than the "
            f"{MAX_ALIAS_NODES} Belay reads; write the repeated parts out, or share less",
        )


class BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in a mapping as it composes it, and
    measures the composed document before constructing it."""

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        _refuse_duplicate_keys(node)
        return node

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _refuse_aliases_too_large(node)
        return node


_CSafeLoader: type[Any] | None = getattr(yaml, "CSafeLoader", None)


if _CSafeLoader is not None:

    class FastBoundedLoader(_CSafeLoader):  # type: ignore[misc, valid-type]
        """The C reader (libyaml) with the same checks, made on the document it composed; the
        aliases measured only when its events held one (without, nothing expands)."""

        aliased = True

        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None:
                _refuse_duplicates_composed(node)
                if self.aliased:
                    _refuse_aliases_too_large(node)
            return node

    FAST_LOADER: type[Any] | None = FastBoundedLoader
else:
    FAST_LOADER = None


class TooManyNodes(yaml.MarkedYAMLError):
    """A document that writes out more than MAX_NODES nodes."""


class NestedTooDeep(yaml.YAMLError):
    """A document nested deeper than MAX_DEPTH (or than the pure-Python reader can follow)."""


def _refuse_past_bounds(text: str, parser: type[Any]) -> bool:
    """TooManyNodes or NestedTooDeep, from the parser's events alone (nothing composed); whether
    the events hold an alias."""
    nodes = depth = 0
    aliased = False
    for event in yaml.parse(text, Loader=parser):
        aliased = aliased or isinstance(event, yaml.AliasEvent)
        if isinstance(event, yaml.ScalarEvent | yaml.AliasEvent | yaml.CollectionStartEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise TooManyNodes(
                    problem=f"it holds more than the {MAX_NODES} nodes Belay reads from one document",
                    problem_mark=cast("yaml.Mark", event.start_mark),  # libyaml's, with line and column
                )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise NestedTooDeep(NESTED_TOO_DEEP)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return aliased


def load_yaml(text: str, *, fast: bool = True) -> Any:
    """The one document in `text`, as `yaml.safe_load` reads it, or yaml.YAMLError (also for a
    key given twice, aliases past their bound, and a document past MAX_NODES or MAX_DEPTH).
    `fast=False` reads it with the pure-Python reader alone, as without libyaml."""
    try:
        if fast and FAST_LOADER is not None:
            try:
                aliased = _refuse_past_bounds(text, FAST_LOADER)
                loader = FAST_LOADER(text)  # a SafeLoader: no arbitrary objects
                try:
                    loader.aliased = aliased
                    return loader.get_single_data()
                finally:
                    loader.dispose()
            except (TooManyNodes, NestedTooDeep, DuplicateKey, AliasesTooLarge):
                raise
            except yaml.YAMLError:
                pass  # what libyaml refuses, the pure-Python reader decides, in its own words
        _refuse_past_bounds(text, BoundedLoader)
        return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader: no arbitrary objects
    except RecursionError:
        raise NestedTooDeep(NESTED_TOO_DEEP) from None


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """A YAML error on one line: what and where."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"
