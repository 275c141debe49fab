"""``fractal node resume``: relaunch parked loops, deepest first.

The relaunched supervisor adopts the open run: same run id, iteration count and
budgets, re-entering the interrupted step, with the environment the run started with
(``lifecycle/start/hosting.keep_env``; ``refresh_env`` replaces it with the caller's). A node
still parking (active with a pause pending) has its pause withdrawn instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from fractal.control import latched, pause_pending, paused_ancestor, subtree, wake_node
from fractal.domain.hosts import elsewhere, host_refusal
from fractal.domain.signals import Signal
from fractal.domain.states import SETTLED, Move, Status
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.lifecycle.heal import heal_all
from fractal.lifecycle.start.hosting import await_boot, host, take
from fractal.lifecycle.steering.signal import Refused, Signalled
from fractal.store.backend import this_host
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from fractal.workspace.nodedir import file_lock


def not_paused(branch: str, status: Status | str) -> str:
    """Why ``branch`` (``status``) cannot be resumed, and what to do instead: a settled
    node (its run ended, or its supervisor was lost before it opened one) starts a new
    run with ``node start --continue``, an idle one with ``node start``."""
    why = f"node {branch} is {status}; resume needs a paused node"
    if status in SETTLED:
        return (f"{why} (resume continues a parked run; this node's run has ended, or its "
                f"supervisor was lost before it opened one): `fractal node start {branch} "
                "--continue` starts a new run")
    if status is Status.IDLE:
        return f"{why}: it has not started; `fractal node start {branch}` starts it"
    return why


def resume_node(tree: Tree, ledger: Ledger, branch: str, *, actor: str,
                environ: Mapping[str, str] | None = None,
                refresh_env: bool = False) -> Signalled:
    """Resume one node: withdraw a pending pause, or relaunch a parked supervisor with the
    run's kept environment (``refresh_env``: replaced by ``environ``, default this
    process's; the message then names the variables that changed)."""
    paths = tree.node(branch)
    with file_lock(tree.lock_path):
        row = ledger.node(branch)
        status = row.status if row else "unregistered"
        run = ledger.open_run_of(branch)
        if run is not None and pause_pending(ledger, branch):
            ledger.delete_signals(run.run_id, Signal.PAUSE.value)
            ledger.add_event(branch, "resume", actor=actor, status="completed",
                             metadata="pending pause withdrawn", run_id=run.run_id)
            wake_node(tree, branch)
            return Signalled(branch, True, f"withdrew the pending pause of {branch}")
        owner = elsewhere(row.host, this_host()) if row is not None else None
        if owner is not None and status is Status.PAUSED:  # a relaunch would host it here
            why = host_refusal("resume", branch, owner, this_host())
            ledger.add_event(branch, "resume", actor=actor, status="failed",
                             metadata=f"refused: {why}")
            return Signalled(branch, False, why)
        if status is not Status.PAUSED or run is None:
            why = not_paused(branch, status)
            ledger.add_event(branch, "resume", actor=actor, status="failed",
                             metadata=f"refused: {why}")
            return Signalled(branch, False, why)
        try:
            hosted = host(paths, ledger, resume_mode=True, environ=environ,
                          refresh=refresh_env)
        except Exception as exc:
            ledger.add_event(branch, "resume", actor=actor, status="failed",
                             metadata=f"refused: {exc}", run_id=run.run_id)
            return Signalled(branch, False, str(exc))
        taken = take(paths, ledger, hosted, Move.RESUME)
        ledger.add_event(branch, "resume", actor=actor, status="completed", run_id=run.run_id)
    note = hosted.env.note if hosted.env is not None else ""
    if taken:  # booting under its recorded pid; a run that parks again says so itself
        return Signalled(branch, True, f"resumed {branch} (run {run.run_id})", note)
    try:
        await_boot(paths, ledger, hosted, from_status=Status.PAUSED)
    except FractalError:
        if _parked_again(ledger, branch, run.run_id) is None:
            raise
    again = _parked_again(ledger, branch, run.run_id)
    if again is not None:
        return Signalled(branch, False, f"{branch} parked again: {again}", note)
    return Signalled(branch, True, f"resumed {branch} (run {run.run_id})", note)


def _parked_again(ledger: Ledger, branch: str, run_id: int) -> str | None:
    """Why a resumed run parked straight away (a broken config, a missing agent...), when
    it did: the newest ``parked`` event written after the verb's ``resume`` event."""
    row = ledger.node(branch)
    if row is None or row.status is not Status.PAUSED:
        return None
    events = ledger.events_of(branch, run_id, ("pause", "resume"))
    last = events[-1] if events else None
    if last is None or last.event != "pause" or not last.meta.startswith("parked"):
        return None
    return last.meta.removeprefix("parked").strip() or "parked"


def resume(ctx: Context, name: str | None, *, lifting_latch: bool = False,
           refresh_env: bool = False) -> list[Signalled]:
    """Resume ``name`` (default: the caller's node) and its paused descendants, deepest
    first, each with its run's kept environment (``refresh_env``: replaced by the
    caller's, ``ctx.environment``). Refused when the acting node may not resume ``name``
    (``fractal.domain.authority``), under a paused ancestor or while the tree is latched
    (unless ``lifting_latch``: ``fractal resume`` itself). Raises Refused for the named
    node."""
    tree, top = ctx.tree, ctx.subtree(name)
    ctx.authorize("resume", top)
    ledger = ctx.ledger
    actor = ctx.actor
    if latched(tree) and not lifting_latch:
        raise Refused(f"the tree {tree.root} is paused; `fractal resume` lifts the brake")
    if top != tree.root:
        ancestor = paused_ancestor(tree, ledger, top)
        if ancestor is not None:
            raise Refused(f"ancestor {ancestor} is paused; resume it instead")
    members = subtree(ledger, top, tree)
    if top != tree.root:
        members = [top, *members]
    rows = {r.node: r.status for r in ledger.nodes()}
    if heal_all(tree, [b for b in members if rows.get(b) is Status.ACTIVE]):
        rows = {r.node: r.status for r in ledger.nodes()}  # a lost supervisor is parked now
    wanted = [b for b in members if rows.get(b) in (Status.PAUSED, Status.ACTIVE)]
    results: list[Signalled] = []
    for branch in sorted(wanted, key=lambda b: -b.count(".")):
        if rows.get(branch) is Status.ACTIVE and not pause_pending(ledger, branch):
            continue
        result = resume_node(tree, ledger, branch, actor=actor, environ=ctx.environment,
                             refresh_env=refresh_env)
        results.append(result)
        if branch == top and not result.ok:
            raise Refused(result.message)
    if top != tree.root and not any(r.branch == top for r in results):
        why = not_paused(top, rows.get(top, "unregistered"))
        ledger.add_event(top, "resume", actor=actor, status="failed", metadata=f"refused: {why}")
        raise Refused(why)
    return results

