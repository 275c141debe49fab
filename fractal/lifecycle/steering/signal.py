"""The signal verbs: ``node stop``, ``finish`` (``--cancel``) and ``pause``, and ``node
done``, the one a node's own agent sends to end its own run.

A verb takes the tree lock, heals the target if it crashed, then writes the signal
through the control plane (``fractal.control.write_signal``: the signal row on the
target's open run and its event, then a touch of ``<node_dir>/.wake`` so the supervisor
reacts at once; the supervisor also polls the database, every second in a busy wait and
every few seconds in an idle one).
Fan-out order: stop and finish signal descendants first (deepest first), then the node;
pause signals the node first, then descendants shallowest-first, re-enumerating until
none is left unsignalled.
"""

from __future__ import annotations

import time

from fractal.control import Signalled, subtree, wake_node, write_signal
from fractal.domain.signals import Signal, fanout_reason
from fractal.domain.states import Status
from fractal.lifecycle.context import Context, Refused
from fractal.lifecycle.heal import crashed, heal_if_crashed
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from fractal.workspace.nodedir import file_lock

__all__ = ["Refused", "Signalled", "cancel_finish", "declare_done", "descendants",
           "result_lines", "send", "signal_node"]


descendants = subtree
"""Registered descendants of a node, shallowest first (``fractal.control.subtree``)."""

BOOT_WAIT = 20.0
"""Seconds a verb waits for a booting node (taken by its start, run not yet open)."""
BOOT_POLL = 0.02
"""Seconds between the reads of that wait."""


def await_run(tree: Tree, ledger: Ledger, branch: str) -> None:
    """Wait while ``branch`` is booting: ``active`` (its start verb took it for the new
    supervisor) with no open run yet, its supervisor alive. Returns when the run opened,
    the status changed, the supervisor is gone (the heal then settles it), or after
    BOOT_WAIT seconds; the caller then reads the node as it is."""
    deadline = time.monotonic() + BOOT_WAIT
    checked = time.monotonic()
    while time.monotonic() < deadline:
        row = ledger.node(branch)
        if row is None or row.status is not Status.ACTIVE or ledger.open_run_of(branch):
            return
        if time.monotonic() - checked >= 0.5:
            checked = time.monotonic()
            if crashed(tree, branch, row):
                return
        time.sleep(BOOT_POLL)


def signal_node(tree: Tree, ledger: Ledger, branch: str, signal: Signal, *, actor: str,
                reason: str, include_paused: bool = False) -> Signalled:
    """The verb's signal: under the tree lock, heal ``branch`` if it crashed, then
    ``fractal.control.write_signal`` (refused, as a ``failed`` event, unless the node is
    active with an open run, or parked with ``include_paused``)."""
    await_run(tree, ledger, branch)
    with file_lock(tree.lock_path):
        heal_if_crashed(tree, branch)
        return write_signal(tree, ledger, branch, signal, actor=actor, reason=reason,
                            include_paused=include_paused)


def _active(ledger: Ledger, branches: list[str]) -> list[str]:
    rows = {r.node: r.status for r in ledger.nodes()}
    return [b for b in branches if rows.get(b) is Status.ACTIVE]


def send(ctx: Context, name: str | None, signal: Signal,
         reason: str | None = None) -> list[Signalled]:
    """Send stop, finish or pause to ``name`` (default: the caller's node) and its subtree.

    At the root it is a tree-wide broadcast with no self signal. Raises Refused when the
    acting node may not steer ``name`` (see ``fractal.domain.authority``), and when the
    named node itself is refused and no descendant was signalled; otherwise a refused
    node (the named one included: a settled parent of live children) is reported in the
    results and skipped.
    """
    tree, top = ctx.tree, ctx.subtree(name)
    ctx.authorize(signal.value, top)
    ledger = ctx.ledger
    actor = ctx.actor
    is_root = top == tree.root
    results: list[Signalled] = []

    def one(branch: str) -> None:
        why = (reason or "") if branch == top else fanout_reason(reason, signal.value, top)
        results.append(signal_node(tree, ledger, branch, signal, actor=actor, reason=why))

    if signal is Signal.PAUSE:
        if not is_root:
            one(top)
            if not results[-1].ok and not _active(ledger, descendants(ledger, top, tree)):
                raise Refused(results[-1].message)
        done: set[str] = set()
        while True:  # re-enumerate: a child may have booted during the sweep
            todo = [b for b in _active(ledger, descendants(ledger, top, tree)) if b not in done]
            if not todo:
                break
            for branch in todo:
                done.add(branch)
                one(branch)
    else:
        for branch in reversed(_active(ledger, descendants(ledger, top, tree))):
            one(branch)
        if not is_root:
            one(top)
            if not results[-1].ok and not any(r.ok for r in results[:-1]):
                raise Refused(results[-1].message)
    return results


def cancel_finish(ctx: Context, name: str | None) -> Signalled:
    """Withdraw ``name``'s own pending finish (``finish --cancel``); its descendants'
    finishes stay. Raises Refused when the acting node may not steer ``name`` or the node
    has no open run."""
    tree, branch = ctx.tree, ctx.subtree(name)
    ctx.authorize("finish_cancel", branch)
    ledger = ctx.ledger
    actor = ctx.actor
    await_run(tree, ledger, branch)
    run = ledger.open_run_of(branch)
    if run is None:
        raise Refused(f"node {branch} has no open run; nothing to cancel")
    removed = ledger.delete_signals(run.run_id, Signal.FINISH.value)
    ledger.add_event(branch, "finish_cancel", actor=actor, status="completed",
                     metadata=f"{removed} finish signal(s) withdrawn", run_id=run.run_id)
    wake_node(tree, branch)
    return Signalled(branch, True, f"withdrew {removed} pending finish signal(s) of {branch}")


def declare_done(ctx: Context, reason: str | None = None) -> Signalled:
    """``fractal node done``: the acting node ends its own run. The loop ends the run
    ``completed`` after the current step (the iteration's remaining steps do not run),
    with the reason ``Done`` or ``Done: <reason>``; its children are not waited for.

    Only the node itself may say it is done (``done`` is a SELF verb and names no target):
    at the root, outside any node, it is refused (the operator ends a node's run with
    ``node finish`` or ``node stop``). Refused too, as a ``failed`` ``done`` event, when
    the node has no open run. Raises Refused, Posing."""
    tree = ctx.tree
    branch = ctx.acting
    if branch == tree.root:
        raise ctx.refuse("done", branch, (
            "`fractal node done` ends the run of the node whose agent runs it, and this "
            "runs outside any node (at the tree's root); to end a node's run from outside "
            "it, run `fractal node finish NODE` (after its current iteration) or `fractal "
            "node stop NODE` (after its current step)"))
    ctx.authorize("done", branch)
    result = signal_node(tree, ctx.ledger, branch, Signal.DONE, actor=ctx.actor,
                         reason=reason or "")
    if not result.ok:
        raise Refused(f"{result.message}: `fractal node done` ends the node's own open run, "
                      f"and {branch} has none; start it (`fractal node start {branch}`) if "
                      "there is work left")
    return Signalled(branch, True, f"{branch} is done: its run ends completed after the "
                                   "current step")


def result_lines(results: list[object]) -> list[str]:
    """The lines the front ends show for a steering verb's results (``Signalled`` rows:
    a refused node's line starts ``skipped:``; none at all says there was nothing to do).
    ``fractal node stop|finish|pause|...`` prints them; the dashboard notifies them."""
    if not results:
        return ["nothing to do: no node in that subtree is in a state this verb acts on"]
    lines = []
    for result in results:
        message = getattr(result, "message", "")
        ok = getattr(result, "ok", True)
        lines.append(message if ok else f"skipped: {message}")
        note = getattr(result, "note", "")
        if note:  # a relaunch's kept-environment note (variable names only)
            lines.append(note)
    return lines
