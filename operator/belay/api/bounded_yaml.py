"""YAML read with a bound on what its aliases expand to, for every file a person hands Belay
(manifests, plans).

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
"""

from __future__ import annotations

from typing import Any

import yaml

# What aliases may add to a document, in nodes; far above any block a manifest or plan shares.
MAX_ALIAS_NODES = 10_000


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


class BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that measures the composed document before constructing it."""

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            expanded, written = _expanded_size(node)
            if expanded - written > MAX_ALIAS_NODES:
                raise AliasesTooLarge(
                    problem=f"its aliases would expand it by {expanded - written} nodes, more than the "
                    f"{MAX_ALIAS_NODES} Belay reads; write the repeated parts out, or share less",
                )
        return node


def load_yaml(text: str) -> Any:
    """The one document in `text`, as `yaml.safe_load` reads it, or yaml.YAMLError (also for
    aliases past the bound, and for nesting deeper than the parser can follow)."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader: no arbitrary objects
    except RecursionError:
        raise yaml.YAMLError("nested deeper than Belay reads") from None


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """A YAML error on one line: what and where."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"
