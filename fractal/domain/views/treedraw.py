"""Status glyphs and the box-drawn tree of nodes (``node list --tree``, the dashboard).

Pure: branch names and statuses in, lines out. A branch's parent is its dotted prefix
(``main.a.b`` under ``main.a``); a branch whose parent is not in the listing hangs under
the nearest listed ancestor, so a filtered listing still draws as one tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ASCII", "UNICODE", "Glyphs", "TreeLine", "draw_tree", "glyph"]


@dataclass(frozen=True)
class Glyphs:
    """One drawing alphabet: the status marks and the four tree connectors."""

    status: Mapping[str, str]
    unknown: str
    tee: str  # a child with siblings below it
    corner: str  # the last child
    pipe: str  # the continuation of an ancestor's sibling line
    blank: str


UNICODE = Glyphs(
    status={"active": "●", "paused": "‖", "idle": "○", "completed": "✓", "stopped": "■",
            "exited": "✗", "killed": "✕", "retired": "·", "crashed": "✗"},
    unknown="?", tee="├── ", corner="└── ", pipe="│   ", blank="    ")
"""Box-drawing characters and Unicode marks, for a terminal."""

ASCII = Glyphs(
    status={"active": "*", "paused": "=", "idle": "o", "completed": "+", "stopped": "#",
            "exited": "x", "killed": "k", "retired": "-", "crashed": "x"},
    unknown="?", tee="|-- ", corner="`-- ", pipe="|   ", blank="    ")
"""Plain ASCII, for pipes, logs and ``--ascii``."""


def glyph(status: str, glyphs: Glyphs = UNICODE) -> str:
    """The one-character mark of ``status`` (``?`` for a status the table does not know)."""
    return glyphs.status.get(status, glyphs.unknown)


@dataclass(frozen=True)
class TreeLine:
    """One drawn line: ``prefix`` (connectors), ``branch``, and its ``depth`` (top = 0)."""

    prefix: str
    branch: str
    depth: int


def _parent_in(branch: str, present: set[str]) -> str | None:
    head = branch
    while "." in head:
        head = head.rpartition(".")[0]
        if head in present:
            return head
    return None


def draw_tree(branches: Sequence[str], glyphs: Glyphs = UNICODE) -> list[TreeLine]:
    """Lines for ``branches`` in depth-first order, siblings sorted by name.

    A top-level entry (no listed ancestor) has an empty prefix; each child gets its
    ancestors' continuation lines and a tee or corner connector.
    """
    present = set(branches)
    children: dict[str | None, list[str]] = {}
    for branch in sorted(present):
        children.setdefault(_parent_in(branch, present), []).append(branch)
    out: list[TreeLine] = []

    def walk(branch: str, lead: str, depth: int, last: bool, top: bool) -> None:
        prefix = "" if top else lead + (glyphs.corner if last else glyphs.tee)
        out.append(TreeLine(prefix, branch, depth))
        below = children.get(branch, [])
        nested = "" if top else lead + (glyphs.blank if last else glyphs.pipe)
        for index, child in enumerate(below):
            walk(child, nested, depth + 1, index == len(below) - 1, False)

    for branch in children.get(None, []):
        walk(branch, "", 0, True, True)
    return out
