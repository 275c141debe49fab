"""Crash healing: a node recorded ``active`` whose supervisor is provably gone is
parked on the next read or verb (the HEAL move): a SIGKILLed supervisor or a reboot is
an interruption, not an end. The run and iteration stay open, every open step closes
``paused`` with ``interrupted: supervisor lost``, and ``fractal resume`` continues the
run where it stopped. A node that never opened a run ends ``exited`` as before.

Provably gone means the tmux probe on the recorded socket says GONE *and* the recorded
supervisor process is not alive, on the machine the node's row names (``nodes.host``):
a node another host owns is never healed from here. An inconclusive probe heals nothing, a node's own
loop never heals itself, and a paused node is never touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.run.reasons import ABNORMAL_EXIT
from fractal.domain.states import Move, Status
from fractal.lifecycle.context import LOOP_NODE_ENV
from fractal.store.backend import this_host
from fractal.tree import Tree

SUPERVISOR_LOST = "interrupted: supervisor lost"
"""The reason of a run parked by a heal (its supervisor died without parking it)."""

if TYPE_CHECKING:
    import psutil

    from fractal.store.ledger import Ledger
    from fractal.store.rows import NodeRow


def crashed(tree: Tree, branch: str, row: NodeRow | None = None) -> bool:
    """True when ``branch`` is recorded active but its supervisor is provably gone.

    ``row`` is the node's registry row when the caller has just read it (a reader of the
    whole tree); None reads it here."""
    from fractal.store import reader  # deferred: start-up cost (12 modules)

    if row is None:
        row = reader.node_row(tree.db_path, branch)
    if row is None or row.status != Status.ACTIVE:  # a whole-tree reader's row holds text
        return False
    if os.environ.get(LOOP_NODE_ENV) == str(tree.node(branch).node_dir):
        return False  # the node's own loop (or its agent) asking
    if row.host is not None and row.host != this_host():
        return False  # its pid and pane are another machine's: nothing here proves it gone
    if row.supervisor_pid and row.supervisor_started:
        from fractal.procs.procinfo import same_process  # deferred: start-up cost (4 modules)

        if same_process(row.supervisor_pid, row.supervisor_started):
            return False
    if not row.tmux_session:
        return row.supervisor_pid is not None  # booted, recorded its pid, and is gone
    from fractal import tmux  # deferred: only an active node's read probes its pane

    socket = Path(row.tmux_socket) if row.tmux_socket else tmux.socket_path()
    return tmux.probe(row.tmux_session, socket) is tmux.Liveness.GONE


def heal_if_crashed(tree: Tree, branch: str) -> bool:
    """Heal ``branch`` if it crashed: reap the process groups of its open steps and every
    other process of the node (``_leftovers``), then in one HEAL move park the run: every
    open step closes ``paused`` (``interrupted: supervisor lost``), the run and iteration
    stay open, a ``pause`` event (``parked interrupted: supervisor lost``) starts the
    parked span a resume credits to the walls, a notice goes to the outbox, the
    supervisor is cleared and the node is ``paused``. With no open run the node lands
    ``exited`` (ABNORMAL_EXIT) instead.

    Healers of one node take turns on a lock file; the node stays ``active`` until the
    last step, so a heal cut short (the reading command killed) is simply done again by
    the next read. Returns whether this call healed it."""
    if not crashed(tree, branch):
        return False
    from fractal.control import heal_lock_path  # deferred: start-up cost (6 modules)
    from fractal.workspace.nodedir import file_lock  # deferred: start-up cost (4 modules)

    with file_lock(heal_lock_path(tree, branch), timeout=60.0):
        if not crashed(tree, branch):
            return False  # healed while we waited for the lock
        return _heal(tree, branch)


def _heal(tree: Tree, branch: str) -> bool:
    """The heal itself, under the node's heal lock (see ``heal_if_crashed``)."""
    from fractal.domain.agent.markers import launch_marker  # deferred: start-up cost (2 modules)

    # deferred: start-up cost (16 modules)
    from fractal.procs.processes import GroupHandle, Reap, grace, kill_group
    from fractal.store.ledger import Ledger  # deferred: start-up cost (23 modules)
    from fractal.store.transition import EventNote  # deferred: start-up cost (22 modules)

    ledger = Ledger(tree.db_path)
    leftovers = _leftovers(tree, branch)  # listed at once: a new run's processes never are
    for step in ledger.open_steps(branch):
        if step.pgid is None or step.pgid_started is None:
            continue
        handle = GroupHandle(pid=step.pgid, pgid=step.pgid, create_time=step.pgid_started,
                             marker=launch_marker(str(tree.db_path), step.step_id))
        kill_group(handle, grace=grace(Reap.HEAL))
        ledger.add_event(branch, "orphan", actor="operator", status="completed",
                         metadata=f"reaped pgid {step.pgid}", run_id=step.run_id,
                         step_id=step.step_id)
    _reap_leftovers(branch, ledger, leftovers)
    run = ledger.open_run_of(branch)
    if run is None:  # it died while it booted, before opening a run: say so in the outbox
        log = tree.node(branch).supervisor_log
        return ledger.move(branch, Move.HEAL, to=Status.EXITED, reason=ABNORMAL_EXIT, notice=(
            f"run exited: {ABNORMAL_EXIT}",
            f"The supervisor of {branch} is gone before it opened a run (it failed while it "
            f"booted); see {log}, then `fractal node start {branch} --continue`.")).ok
    iteration = ledger.iterations_of(run.run_id)
    iter_id = iteration[-1].iter_id if iteration and iteration[-1].ended_at is None else None
    return ledger.move(
        branch, Move.HEAL, to=Status.PAUSED, reason=SUPERVISOR_LOST, exit_code=None,
        event=EventNote("pause", actor="operator", metadata=f"parked {SUPERVISOR_LOST}",
                        run_id=run.run_id, iter_id=iter_id),
        notice=(f"run {run.run_id} parked: {SUPERVISOR_LOST}",
                f"The supervisor of {branch} is gone (SIGKILL or reboot). Run {run.run_id} "
                f"is parked; `fractal resume` continues it where it stopped.")).ok


def _leftovers(tree: Tree, branch: str) -> list[psutil.Process]:
    """What the dead supervisor started that no open step row records — a ``setup.sh``
    still running, a hook, an escapee — found by the ``_NODE=<node_dir>`` entry every child
    of the loop inherits (no process of the tree is left running)."""
    from fractal.procs.processes import environ_processes  # deferred: start-up cost (16 modules)

    return environ_processes(f"_NODE={tree.node(branch).node_dir}")


def _reap_leftovers(branch: str, ledger: Ledger, leftovers: list[psutil.Process]) -> None:
    """Stop ``leftovers`` still alive (TERM, the heal grace, KILL); an ``orphan`` event
    names them."""
    # deferred: start-up cost (16 modules)
    from fractal.procs.processes import Reap, grace, stop_processes

    alive = [p for p in leftovers if _running(p)]
    if not alive:
        return
    stop_processes(alive, grace=grace(Reap.HEAL))
    run = ledger.open_run_of(branch)
    pids = ", ".join(str(p.pid) for p in alive[:10])
    ledger.add_event(branch, "orphan", actor="operator", status="completed",
                     metadata=f"reaped {len(alive)} leftover process(es): pid {pids}",
                     run_id=run.run_id if run else None)


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (an already-killed child waiting for init is not a leftover);
    ``is_running`` re-checks the pid's identity."""
    import psutil  # deferred: start-up cost (psutil, 28 modules)

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def heal_all(tree: Tree, branches: list[str]) -> list[str]:
    """Heal every crashed node among ``branches``; returns the healed ones."""
    return [b for b in branches if heal_if_crashed(tree, b)]
