"""The limits a spawned node inherits when its spawn does not state them, and the caps the
spawn template of a node's prompt carries. Pure: numbers in, numbers or text out.

The rule: a child's ``max_depth`` (the levels it may spawn below itself) is its parent's
minus one, never below 0; a top-level node's parent is the root, whose levels are the
tree's ``max_depth`` (the root config.json, set by ``fractal init --max-depth``;
DEFAULT_TREE_DEPTH when the key is absent, unlimited when it is null). A child spawned
from inside a capped node without ``--max-cost`` gets ``budget_share`` of the parent's
remaining budget: remaining / (the parent's ``max_children``, or SHARE_DIVISOR when it
has none), rounded down to the cent. Kept apart from ``domain.nodeinit`` (whose patterns
compile at import) because every supervisor renders the caps into its prompts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fractal.domain.errors import InvalidValue

__all__ = ["DEFAULT_TREE_DEPTH", "SHARE_DIVISOR", "budget_share", "child_caps",
           "inherited_depth", "parse_tree_depth", "tree_depth"]


DEFAULT_TREE_DEPTH = 2
"""Levels of nodes below the root a tree allows when its config.json names no
``max_depth``: a lead and its children (whose prompts carry no spawn protocol)."""

SHARE_DIVISOR = 4
"""How many children a parent's remaining budget is split between when the parent names
no ``max_children``."""


def tree_depth(root_config: Mapping[str, object]) -> int | None:
    """The tree's ``max_depth`` from the root's config.json: DEFAULT_TREE_DEPTH when the
    key is absent or not a count, None (unlimited) when it is null."""
    if "max_depth" not in root_config:
        return DEFAULT_TREE_DEPTH
    value = root_config["max_depth"]
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_TREE_DEPTH


def parse_tree_depth(text: str) -> int | None:
    """``fractal init --max-depth TEXT``: a whole number of levels below the root, at
    least 1, or ``unlimited`` (None). Raises InvalidValue naming both forms."""
    word = text.strip().lower()
    if word in ("unlimited", "null", "none"):
        return None
    if word.isdigit() and int(word) >= 1:
        return int(word)
    raise InvalidValue(f"--max-depth {text}: give the levels of nodes the tree allows below "
                       f"its root, a whole number of at least 1 (default "
                       f"{DEFAULT_TREE_DEPTH}), or `unlimited`")


def inherited_depth(parent_levels: int | None) -> int | None:
    """A child's ``max_depth`` when its spawn names none: the levels its parent may still
    spawn (``parent_levels``; the tree's depth for the root) minus the child's own level,
    never below 0. None (unlimited) stays None."""
    return None if parent_levels is None else max(0, parent_levels - 1)


def budget_share(remaining: float, max_children: int | None) -> float:
    """A child's ``max_cost`` (USD) when its spawn names none: ``remaining`` (the parent's
    budget left) / ``max_children`` (SHARE_DIVISOR when None or 0), rounded down to the
    cent, never below 0."""
    divisor = max_children or SHARE_DIVISOR
    return max(0.0, math.floor(max(0.0, remaining) / divisor * 100) / 100)


def child_caps(depth_left: int | None, remaining: float | None,
               max_children: int | None) -> str:
    """The cap options of the spawn template a node's prompt carries (``--max-children N
    --max-depth N [--max-cost USD]``), filled with what a child would inherit:
    ``depth_left`` is the node's own ``max_depth`` (None: unlimited, the child gets 1),
    ``remaining`` its budget left (None: uncapped, no ``--max-cost``), ``max_children``
    its own cap. A child with no level left gets ``--max-children 0``."""
    depth = inherited_depth(depth_left)
    depth = 1 if depth is None else depth
    options = f"--max-children {SHARE_DIVISOR if depth > 0 else 0} --max-depth {depth}"
    if remaining is not None:
        options += f" --max-cost {budget_share(remaining, max_children):.2f}"
    return options
