"""``fractal node start --continue NODE --tree``: re-arm a settled subtree in one command.

Each settled node of the subtree (NODE first when it is not the root, then its
descendants shallowest first, so a child's new run records its parent's) gets a new run
exactly as ``start --continue`` gives one. Nodes still running, paused, idle, retired or
missing are left alone. A refusal of NODE itself is raised; a descendant's refusal is
reported and the others still start.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractal.domain.states import SETTLED
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.lifecycle.start import Started, start_node


@dataclass(frozen=True)
class TreeStart:
    """What ``start_tree`` did: the nodes started, and (branch, why) for each refusal."""

    started: tuple[Started, ...]
    refused: tuple[tuple[str, str], ...]


def start_tree(ctx: Context, name: str | None, *, clean: bool = False,
               max_cost: str | None = None, refresh_env: bool = False) -> TreeStart:
    """Start a new run of every settled node of ``name``'s subtree (see the module
    docstring). ``clean``, ``max_cost`` and ``refresh_env`` apply to each node as in ``start --continue``.
    Raises Refused when the acting node may not start ``name``'s subtree
    (``fractal.domain.authority``), FractalError when ``name`` itself is refused, or when
    nothing is settled."""
    from fractal.control import subtree

    tree, top = ctx.tree, ctx.subtree(name)
    ctx.authorize("start", top)
    ledger = ctx.ledger
    members = subtree(ledger, top, tree)
    if top != tree.root:
        members = [top, *members]
    status = {r.node: r.status for r in ledger.nodes()}
    settled = [b for b in members if status.get(b) in SETTLED]
    if not settled:
        raise FractalError(f"no settled node under {top} to continue; `fractal node list "
                           f"{top}` shows their statuses")
    started: list[Started] = []
    refused: list[tuple[str, str]] = []
    for branch in settled:
        try:
            started.append(start_node(ctx, branch, continue_mode=True, clean=clean,
                                      max_cost=max_cost, refresh_env=refresh_env))
        except FractalError as exc:
            if branch == top:
                raise
            refused.append((branch, str(exc)))
    return TreeStart(tuple(started), tuple(refused))
