"""``fractal pause`` / ``fractal resume``: the tree-wide brake.

``pause`` writes the latch first, so no start or spawn slips through, then pauses every
active node parent-first. ``resume`` lifts the latch, withdraws pauses still pending,
and relaunches parked loops deepest-first.
"""

from __future__ import annotations

from fractal.control import clear_latch, set_latch
from fractal.domain.signals import Signal
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.lifecycle.resume import resume
from fractal.lifecycle.steer import Signalled, send
from fractal.tree import trees_in


def _in_tree(ctx: Context, name: str | None, verb: str) -> Context:
    """The context of the tree ``name`` roots (default: the caller's), once the operator's
    authority is checked there: the brake acts for a whole tree."""
    tree = ctx.tree
    if name is not None and name != tree.root:
        found = next((t for t in trees_in(tree.repo) if t.root == name), None)
        if found is None:
            raise FractalError(f"no tree rooted at {name!r} in {tree.repo}")
        ctx = ctx.for_tree(found)
    ctx.authorize(verb, ctx.tree.root)
    return ctx


def brake(ctx: Context, name: str | None, reason: str | None) -> list[Signalled]:
    """Latch the tree (default: the caller's), then pause every active node in it. Only
    the operator may (``fractal.domain.authority``): raises Refused otherwise."""
    ctx = _in_tree(ctx, name, "brake")
    set_latch(ctx.tree, reason or "paused by fractal pause")
    return send(ctx, ctx.tree.root, Signal.PAUSE, reason)


def release(ctx: Context, name: str | None, *, refresh_env: bool = False) -> list[Signalled]:
    """Lift the latch and resume every paused node of the tree, deepest first, each with
    its run's kept environment (``refresh_env``: replaced by the caller's). Only the
    operator may: raises Refused otherwise."""
    ctx = _in_tree(ctx, name, "release")
    clear_latch(ctx.tree)
    return resume(ctx, ctx.tree.root, lifting_latch=True, refresh_env=refresh_env)
