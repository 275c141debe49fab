"""The run's end when the database stayed locked past the bound: a park, not an exit.

Every write of the loop waits out another process's lock (``store.lockwait``), so a
lock held for minutes only slows the run. One held past the bound (``DatabaseLocked``)
parks the run as an interruption does: one INTERRUPT move, once the database takes
writes again, closes the open steps ``paused`` with ``interrupted: database locked``,
keeps the run and its iteration open, writes the ``pause`` event and a notice, and
``fractal node resume`` continues the same run. When even that move cannot get the
lock, the supervisor leaves the node ``active`` with its process gone and writes
nothing more: the next read's heal parks the run the same way (``interrupted:
supervisor lost``), and the pane and ``supervisor.log`` say what happened.
"""

from __future__ import annotations

import logging

from fractal.domain.states import Move
from fractal.runtime.adopt import AWAITING_APPROVAL, save_sessions
from fractal.runtime.context import RunState
from fractal.runtime.pane import Reporter
from fractal.store.ledger import Ledger
from fractal.store.lockwait import DatabaseLocked
from fractal.store.transition import EventNote
from fractal.tree import NodePaths

log = logging.getLogger(__name__)

DATABASE_LOCKED = "interrupted: database locked"
"""The reason of a run parked because the database stayed locked past the bound."""


def park_locked(ledger: Ledger, paths: NodePaths, state: RunState | None, reporter: Reporter,
                exc: DatabaseLocked) -> bool:
    """Park the node's open run after ``exc`` (see the module docstring). True when the
    park was recorded (or there was no run to park); False when the database refused
    it too, so the caller must write nothing more to it."""
    node = paths.branch
    reporter.release()
    reporter.warning(f"{exc}; parking the run (nothing committed) once the database is free")
    if state is not None:
        save_sessions(paths.session_path, state.sessions)
    try:
        run = ledger.open_run_of(node)
        if run is None:
            return True  # nothing to park: the exit's ABORT settles the node
        if state is not None and state.held_gate is not None:
            ledger.park_step(state.held_gate, node, 0, f"{AWAITING_APPROVAL}; {DATABASE_LOCKED}")
        parked = ledger.move(node, Move.INTERRUPT, reason=DATABASE_LOCKED, exit_code=1,
                             event=EventNote("pause", actor="loop",
                                             metadata=f"parked {DATABASE_LOCKED}",
                                             run_id=run.run_id,
                                             iter_id=state.iter_id if state else None),
                             notice=(f"run {run.run_id} parked: {DATABASE_LOCKED}",
                                     f"The database stayed locked by another process past "
                                     f"the wait's bound, so the supervisor of {node} parked "
                                     "the run. Once nothing holds the database, `fractal node "
                                     f"resume {node}` continues the run."))
    except DatabaseLocked as again:
        log.error("could not park the run: %s", again)
        reporter.warning(f"the database is still locked; {node} stays active with no "
                         "supervisor, and the next `fractal node status` parks its run "
                         f"(then `fractal node resume {node}`)")
        return False
    if not parked.ok:
        reporter.warning(f"cannot park the run: {parked.why}")
        return True
    reporter.banner_open(f"Run {run.run_id} parked ({DATABASE_LOCKED}); `fractal node resume "
                         f"{node}` continues it", major=True)
    return True
