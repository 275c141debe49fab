"""Short node names typed inside a node's loop resolve among that node's own children
first, then its descendants, then the whole tree; outside any loop over the whole tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fractal.errors import NodeNotFound
from fractal.tree import Tree, resolve_node

TREE = Tree(repo=Path("/nonexistent"), root="main")
KNOWN = ["main", "main.a1", "main.a1.x", "main.a2", "main.a2.x", "main.a2.p",
         "main.a2.p.y", "main.a2.q", "main.a2.q.y", "main.x", "main.a1.z"]


@pytest.mark.parametrize(("typed", "near", "expected"), [
    ("x", "main.a2", "main.a2.x"),          # own child before the root's and a cousin's
    ("x", "main.a1", "main.a1.x"),
    ("p.y", "main.a2", "main.a2.p.y"),      # a path below the loop's node
    ("z", "main.a2", "main.a1.z"),          # nothing below: the whole tree, as outside
    ("main.a1.x", "main.a2", "main.a1.x"),  # a full branch is always that branch
    ("a1", "main.a2", "main.a1"),
    ("x", None, "main.x"),                  # outside any loop: below the root first
    ("a1.x", None, "main.a1.x"),
])
def test_a_short_name_resolves_near_the_loop_node_first(
        typed: str, near: str | None, expected: str) -> None:
    assert resolve_node(typed, KNOWN, TREE, near=near) == expected


@pytest.mark.parametrize(("typed", "near", "message"), [
    ("y", "main.a2", "ambiguous below main.a2: main.a2.p.y, main.a2.q.y"),
    ("y", None, "ambiguous: main.a2.p.y, main.a2.q.y"),
    ("nope", "main.a2", "no node found for 'nope'"),
])
def test_an_ambiguous_or_unknown_name_is_refused(typed: str, near: str | None,
                                                 message: str) -> None:
    with pytest.raises(NodeNotFound, match=re.escape(message)):
        resolve_node(typed, KNOWN, TREE, near=near)


def test_outside_a_loop_a_cousin_clash_is_still_ambiguous() -> None:
    known = ["main", "main.a1", "main.a1.x", "main.a2", "main.a2.x"]
    with pytest.raises(NodeNotFound, match=re.escape("ambiguous: main.a1.x, main.a2.x")):
        resolve_node("x", known, TREE)
    assert resolve_node("x", known, TREE, near="main.a2") == "main.a2.x"
