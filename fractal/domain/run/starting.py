"""Why a node cannot be started as it stands, and what to do instead. Pure: no I/O.

``fractal node start`` starts an ``idle`` node (``--continue``: a settled one, ``SETTLED``).
A node that is ``paused`` has a run parked, which is resumed, not started again: under the
tree brake ``fractal resume`` lifts the brake and resumes it, otherwise ``fractal node
resume`` does. An ``active`` node's run is still going.
"""

from __future__ import annotations

from fractal.domain.states import SETTLED, Status

__all__ = ["start_refusal"]


def start_refusal(branch: str, status: str | None, *, continuing: bool, tree_paused: bool,
                  root: str) -> str | None:
    """The refusal of ``fractal node start [--continue] branch`` for a node of ``status``
    (None: unregistered), or None when the status lets it start: ``idle`` without
    ``continuing``, a settled status with it. ``tree_paused``: the tree brake (the latch of
    ``fractal pause``) is on; ``root`` names the tree's root branch. Each refusal names the
    command that applies instead."""
    shown = status or "unregistered"
    if status == Status.PAUSED:
        if tree_paused:
            return (f"node {branch} is paused, so it is resumed, not started: the tree "
                    f"{root} is paused; `fractal resume` lifts the brake and resumes its run")
        return (f"node {branch} is paused, so it is resumed, not started: `fractal node "
                f"resume {branch}` resumes its run (or stop it, `fractal node stop {branch}`, "
                f"then `fractal node start {branch} --continue`)")
    if status == Status.ACTIVE:
        return (f"node {branch} is active: its run is still going; follow it (`fractal node "
                f"status {branch}`), or stop it (`fractal node stop {branch}`) and start it "
                "again with --continue")
    if continuing:
        if status in SETTLED:
            return None
        hint = f"; a node never run starts without it: `fractal node start {branch}`" \
            if status == Status.IDLE else ""
        return (f"node {branch} is {shown}; --continue needs a settled node (completed, "
                f"stopped, exited or killed){hint}")
    if status == Status.IDLE:
        return None
    hint = f" (use --continue to start a new run: `fractal node start {branch} --continue`)" \
        if status in SETTLED else ""
    return f"node {branch} is {shown}, not idle{hint}"
