"""Who an attention item is for (``domain.attention.rules``): the operator, or first the loop
that can act on it. Pure: items, facts and ``now`` (epoch s) in, the split out.

An item about a node whose parent is a running agent loop is that loop's first (its
SYNC digest shows the child's notices, gates and waits); it reaches the operator once
it has waited ``grace`` seconds unhandled, or at once when the parent is not running.
The operator's own pause says nothing to them until ``grace`` has passed.
"""

from __future__ import annotations

from collections.abc import Iterable

from fractal.domain.attention.rules import Item, Kind, NodeFacts

__all__ = ["HOLD_GRACE_S", "ROUTED", "for_operator", "held_by", "held_subject"]

HOLD_GRACE_S = 600
"""How long an item a running parent loop can act on is held for that loop (seconds;
the root config's ``inbox_grace`` overrides it) before it reaches the operator."""

ROUTED = frozenset({Kind.GATE, Kind.EXITED, Kind.BUDGET, Kind.NO_PROGRESS, Kind.INTERRUPTED,
                    Kind.PAUSED, Kind.MERGE, Kind.ORPHANS})
"""Kinds about a node its parent's loop acts on (approve, restart, resume, merge, finish):
while that parent runs they are the parent's first (its SYNC digest)."""


def held_by(item: Item, facts: NodeFacts, now: float, grace: float) -> str | None:
    """Who ``item`` (of the node ``facts`` describe) is for while it is younger than
    ``grace`` seconds, if not the operator; None: it is the operator's now.

    - an item of a ``ROUTED`` kind while the node's parent is a running agent loop: that
      parent's (it reaches the operator once it is ``grace`` old, the parent not having
      acted, or at once when the parent stops running);
    - an ``unstarted`` item while the waiting node runs: that node's own loop (its
      digest names the idle children and the command that starts them);
    - a ``paused`` item for a pause the operator asked for: the operator's own action
      (``operator``), shown nowhere until ``grace`` has passed since the ask.
    """
    if item.kind is Kind.PAUSED and facts.paused_by_operator is not None \
            and now - facts.paused_by_operator < grace:
        return "operator"
    if now - item.since >= grace:
        return None
    if item.kind is Kind.UNSTARTED and facts.status == "active" and not facts.gone:
        return facts.branch
    if item.kind in ROUTED and facts.parent_running:
        return facts.branch.rpartition(".")[0]
    return None


def for_operator(found: Iterable[tuple[Item, bool]], facts: Iterable[NodeFacts], now: float,
                 grace: float) -> tuple[list[tuple[Item, bool]], list[tuple[Item, str]]]:
    """``found`` (``classify``'s pairs) split into the operator's and the held ones, each
    held item with who holds it (``held_by``)."""
    by_branch = {f.branch: f for f in facts}
    mine: list[tuple[Item, bool]] = []
    held: list[tuple[Item, str]] = []
    for item, acked in found:
        node = by_branch.get(item.node)
        holder = None if node is None else held_by(item, node, now, grace)
        if holder is None:
            mine.append((item, acked))
        else:
            held.append((item, holder))
    return mine, held


def held_subject(item: Item) -> str:
    """How a held item is named to the operator: its kind and what it is about, e.g.
    ``gate main.lead.c``. An ``unstarted`` item is about the idle children its node waits
    for, not the node (which holds it): ``unstarted main.lead2.a, main.lead2.b``."""
    children = item.details.get("children") if item.kind is Kind.UNSTARTED else None
    if isinstance(children, list) and children:
        return f"{item.kind.value} {', '.join(str(c) for c in children)}"
    return f"{item.kind.value} {item.node}"
