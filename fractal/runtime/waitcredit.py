"""The credit of a wait that is not work: a usage-window or provider-outage wait moves the
run and iteration walls by the seconds it waited, and records them (a ``wait_credit``
event: metadata the seconds, on the run and iteration), so a resume after a park, a heal
or an interruption credits them again instead of charging them to the walls.
"""

from __future__ import annotations

from fractal.runtime.context import RunState
from fractal.store.ledger import Ledger

__all__ = ["CREDIT_EVENT", "credit_wait", "wait_credits"]

CREDIT_EVENT = "wait_credit"
"""The event recording one wait's credited seconds (metadata ``12.500``)."""


def credit_wait(ledger: Ledger, node: str, state: RunState, waited: float) -> None:
    """Move ``state``'s run and iteration deadlines ``waited`` seconds later and record the
    credit on the run (and its open iteration)."""
    if waited <= 0:
        return
    if state.run_deadline is not None:
        state.run_deadline += waited
    if state.iter_deadline is not None:
        state.iter_deadline += waited
    ledger.add_event(node, CREDIT_EVENT, actor="loop", status="completed",
                     metadata=f"{waited:.3f}", run_id=state.run_id, iter_id=state.iter_id)


def wait_credits(ledger: Ledger, node: str, run_id: int,
                 iter_id: int | None = None) -> float:
    """Seconds of waits credited to run ``run_id`` (only those of iteration ``iter_id``
    when given); a malformed record counts 0."""
    total = 0.0
    for event in ledger.events_of(node, run_id, (CREDIT_EVENT,)):
        if iter_id is not None and event.iter_id != iter_id:
            continue
        try:
            total += max(0.0, float(event.meta))
        except ValueError:
            continue
    return total
