"""``fractal node kill``: an immediate reap of a node and its subtree.

The KILL move comes first (the ``kill`` event, the kill signal, the status ``killed``
and the run's end notice in the node's outbox, ``run killed: killed by <actor>``, one
transaction), so the dying loop cannot relabel the node; then TERM to the
supervisor's group and the agent groups of open steps (in that order, in one shared
grace), KILL, while the pane's session is killed; then the open rows close ``killed`` with
the attribution ``killed by <actor>[: reason]`` and the supervisor is cleared, in one
transaction. An open step whose agent group is not recorded yet (its loop is between
the spawn and ``set_step_process``) is stopped by its launch marker, which the agent
carries from its first instruction; one still between fork and exec at the first scan
is found by the re-scan after the grace. Descendants go first and are re-enumerated to a
fixpoint, so a child booting during the sweep is caught. A node another host owns
(``nodes.host``) is refused, its kill recorded as a ``failed`` event saying where to run
it: its pids and pane are that machine's.

The command imports no psutil (``processes`` stops groups from ``/proc`` and pidfds) and
starts no thread: a kill costs about what a ``node stop`` does plus the wait for the
processes to die.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import NamedTuple

from fractal import tmux
from fractal.domain.agent.markers import launch_marker
from fractal.domain.hosts import elsewhere, kill_refusal
from fractal.domain.run.reasons import clip_reason
from fractal.domain.signals import Signal, attribution, fanout_reason
from fractal.domain.states import Move, Status
from fractal.errors import FractalError, TmuxError
from fractal.lifecycle.context import Context
from fractal.lifecycle.heal import crashed, heal_if_crashed
from fractal.lifecycle.steering.signal import Refused, Signalled, descendants
from fractal.procs.processes import GroupHandle, Reap, grace, group_of, kill_groups, marker_only
from fractal.store.backend import this_host
from fractal.store.ledger import Ledger
from fractal.store.rows import NodeRow
from fractal.store.transition import EventNote, SignalNote
from fractal.tree import Tree


def killable(row: NodeRow) -> bool:
    """Active, paused, or idle with a live session (a supervisor still booting; never
    probed for a node another host owns: its tmux socket is that machine's)."""
    if row.status in (Status.ACTIVE, Status.PAUSED):
        return True
    here = elsewhere(row.host, this_host()) is None
    if row.status is Status.IDLE and row.tmux_session and here:
        return tmux.probe(row.tmux_session, _socket(row)) is tmux.Liveness.ALIVE
    return False


class _Condemned(NamedTuple):
    """A node whose kill is recorded and whose process groups are still to be stopped."""

    branch: str
    row: NodeRow
    note: str
    supervisor: GroupHandle | None
    agents: list[GroupHandle]


def _condemn(tree: Tree, ledger: Ledger, branch: str, *, actor: str,
             reason: str | None) -> _Condemned | Signalled:
    """Record the kill of one node (event, signal, status ``killed``: one KILL move) and
    list its groups: the supervisor's and each open step's agent group. A refusal is a
    Signalled(ok=False)."""
    row = ledger.node(branch)
    owner = elsewhere(row.host, this_host()) if row is not None else None
    if owner is not None:  # its pids and pane are that machine's: never signalled from here
        why = kill_refusal(branch, owner, this_host())
        ledger.add_event(branch, Signal.KILL.value, actor=actor, status="failed",
                         metadata=f"refused: {why}")
        return Signalled(branch, False, why)
    if row is not None and crashed(tree, branch, row):  # (a live loop needs no heal read)
        heal_if_crashed(tree, branch)
        row = ledger.node(branch)
    if row is None or not killable(row):
        status = row.status if row else "unregistered"
        why = f"node {branch} is {status}; nothing to kill"
        ledger.add_event(branch, Signal.KILL.value, actor=actor, status="failed",
                         metadata=f"refused: {why}")
        return Signalled(branch, False, why)
    note = clip_reason(attribution("kill", actor, reason))
    run = ledger.open_run_of(branch)
    # Recorded complete up front: the caller may be inside the node and die with it.
    killed = ledger.move(branch, Move.KILL, event=EventNote(
        Signal.KILL.value, actor=actor, metadata=note, run_id=run.run_id if run else None),
        signal=SignalNote(run.run_id, Signal.KILL.value, note) if run is not None else None,
        notice=_end_notice(ledger, branch, run.run_id, note) if run is not None else None)
    if not killed.ok:  # it settled since it was read
        why = f"node {branch} is {killed.before or 'unregistered'}; nothing to kill"
        ledger.add_event(branch, Signal.KILL.value, actor=actor, status="failed",
                         metadata=f"refused: {why}")
        return Signalled(branch, False, why)
    # deferred: start-up cost: only a kill that landed reads it (git behind it)
    from fractal.workspace.subtree import refresh_unmerged_above

    with contextlib.suppress(FractalError):  # unread, the fact stays: the lead not ready
        refresh_unmerged_above(tree, ledger, branch, actor=actor)
    supervisor = None
    if row.supervisor_pid and row.supervisor_started:
        supervisor = group_of(row.supervisor_pid, row.supervisor_started)
    agents: list[GroupHandle] = []
    for step in ledger.open_steps(branch):
        marker = launch_marker(str(tree.db_path), step.step_id)
        if step.pgid is not None and step.pgid_started is not None:
            agents.append(GroupHandle(pid=step.pgid, pgid=step.pgid,
                                       create_time=step.pgid_started, marker=marker))
        else:  # spawned, its group not recorded yet (or never started): found by marker
            agents.append(marker_only(marker))
    return _Condemned(branch, row, note, supervisor, agents)


def _end_notice(ledger: Ledger, branch: str, run_id: int, note: str) -> tuple[str, str] | None:
    """The killed run's end notice for the node's outbox (``run killed: killed by
    operator; EXECUTE never approved``, a gate left waiting named), so a parent's feed
    and SYNC digest learn of the end as of any other; None when it cannot be composed
    (the kill goes on without it)."""
    gates = [s.step_name for s in ledger.pending_approvals(branch)
             if s.run_id == run_id and s.status in (Status.ACTIVE, Status.PAUSED)]
    reason = f"{note}; {', '.join(dict.fromkeys(gates))} never approved" if gates else note
    try:
        return ledger.run_end_draft(run_id, Status.KILLED.value, clip_reason(reason))
    except FractalError:
        return None


def _reap(ledger: Ledger, batch: list[_Condemned]) -> list[Signalled]:
    """Stop the groups of ``batch`` and kill their panes, then close the open rows ``killed``.

    Every supervisor's group and every agent group share one TERM -> grace (``Reap.KILL``)
    -> KILL window (``processes.kill_groups``): a tree of agents ignoring TERM costs one
    grace, not one per node or per wave. The supervisors are signalled first, so a loop
    has its TERM pending before its agent can die: it closes its rows ``killed`` (the
    KILL move is already recorded) instead of booking the step as its agent's end. The
    panes' sessions are killed meanwhile (a loop whose SIGHUP comes first acts the same:
    its first signal is the one it handles). Once all of it is gone, each node's open
    rows close ``killed`` and its supervisor is cleared in one transaction. A pane tmux
    cannot reach (TmuxError: no tmux on ``PATH``) is raised once the groups are stopped.
    """
    panes: list[tmux.SessionKill] = []
    unreachable: TmuxError | None = None  # raised once the groups are stopped
    for c in batch:
        if c.row.tmux_session:
            try:
                panes.append(tmux.killing_session(c.row.tmux_session, _socket(c.row)))
            except TmuxError as exc:
                unreachable = exc
    handles = [c.supervisor for c in batch if c.supervisor is not None]
    kill_groups([*handles, *(h for c in batch for h in c.agents)], grace=grace(Reap.KILL))
    for pane in panes:
        pane.wait()
    if unreachable is not None:
        raise unreachable
    done: list[Signalled] = []
    for c in batch:
        ledger.close_open(c.branch, Status.KILLED.value, c.note, clear_supervisor=True)
        done.append(Signalled(c.branch, True, f"killed {c.branch}"))
    return done


def _socket(row: NodeRow) -> Path:
    """The tmux server socket ``row``'s node was started on."""
    return Path(row.tmux_socket) if row.tmux_socket else tmux.socket_path()


def _kill_batch(tree: Tree, ledger: Ledger, branches: list[str], *, actor: str,
                reasons: list[str | None]) -> list[Signalled]:
    """Condemn each of ``branches`` (with its reason), then reap them together."""
    outcome: dict[str, Signalled] = {}
    batch: list[_Condemned] = []
    for branch, reason in zip(branches, reasons, strict=True):
        got = _condemn(tree, ledger, branch, actor=actor, reason=reason)
        if isinstance(got, _Condemned):
            batch.append(got)
        else:
            outcome[branch] = got
    outcome.update((r.branch, r) for r in _reap(ledger, batch))
    return [outcome[b] for b in branches]


def kill(ctx: Context, name: str | None, reason: str | None = None) -> list[Signalled]:
    """Kill ``name`` (default: the caller's node) and every killable descendant.

    At the root every node of the tree is killed. Raises Refused when the acting node may
    not kill ``name`` (``fractal.domain.authority``), and when the named node itself
    cannot be killed and no descendant was either (a settled parent of live children is
    reported as skipped, its children killed).
    """
    tree, top = ctx.tree, ctx.subtree(name)
    ctx.authorize("kill", top)
    ledger = ctx.ledger
    actor = ctx.actor
    results: list[Signalled] = []
    done: set[str] = set()
    fanned = fanout_reason(reason, "kill", top)
    while True:
        rows = {r.node: r for r in ledger.nodes()}
        todo = [b for b in reversed(descendants(ledger, top, tree))
                if b not in done and killable(rows[b])]
        reasons: list[str | None] = [fanned] * len(todo)
        # The node itself joins its subtree's first sweep (one grace for all, not two).
        if top != tree.root and top not in done and top in rows and killable(rows[top]):
            todo.append(top)
            reasons.append(reason)
        if not todo:
            break
        done.update(todo)
        done.add(top)  # considered once: a top not killable now is retried alone below
        results += _kill_batch(tree, ledger, todo, actor=actor, reasons=reasons)
    if top != tree.root:
        mine = [r for r in results if r.branch == top]
        if not mine:
            mine = _kill_batch(tree, ledger, [top], actor=actor, reasons=[reason])
            results += mine
        if not mine[0].ok and not any(r.ok for r in results if r.branch != top):
            raise Refused(mine[0].message)
    return results
