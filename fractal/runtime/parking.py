"""What a supervisor says the moment a signal tears a step down (C-c in its pane, SIGTERM,
SIGHUP), before it ends the agent's process group: that wait lasts up to the kill grace
(``FRACTAL_KILL_GRACE``, 10 s) and more for an agent that ignores signals, and the node is
still recorded ``active`` until the run is parked.

The pane says so, and a ``pause`` event ``started`` with ``parking: interrupted: <SIGNAL>``
lets ``fractal node status`` read ``active (pausing: interrupted: SIGINT)`` meanwhile (a
detail of ``active``, no status of its own). The park's own ``parked ...`` event follows
it. Not for a kill (``fractal node kill`` is already shown ``killing``).
"""

from __future__ import annotations

import logging
import signal

from fractal.domain.signals import PARKING, Signal
from fractal.runtime.pane import Reporter
from fractal.store.ledger import Ledger

log = logging.getLogger(__name__)

__all__ = ["announce_parking"]


def announce_parking(ledger: Ledger, reporter: Reporter, node: str, run_id: int,
                     step_id: int, exc: BaseException) -> None:
    """When ``exc`` is the supervisor's ``runtime.boot.Interrupted`` (known by its
    ``signum``: boot imports this module's importers), say in the pane and in the ledger
    that the run is being parked, before the agent's group is ended. Never raises (the
    teardown must go on)."""
    signum = getattr(exc, "signum", None)
    if not isinstance(signum, int) or isinstance(exc, Exception):
        return
    name = signal.Signals(signum).name
    try:
        if any(s.signal == Signal.KILL.value for s in ledger.signals(run_id)):
            return
        reporter.warning(f"received {name}; ending the agent's process group, then "
                         "parking the run (nothing committed)")
        ledger.add_event(node, "pause", actor="loop", status="started",
                         metadata=f"{PARKING}interrupted: {name}", run_id=run_id,
                         step_id=step_id)
    except Exception as err:  # the teardown goes on whatever this could not say
        log.warning("could not record the parking of %s: %s", node, err)
