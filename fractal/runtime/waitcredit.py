"""The credit of a wait that is not work: a usage-window or provider-outage wait moves the
run and iteration walls by the seconds it waited, and records them (a ``wait_credit``
event: metadata the seconds, on the run and iteration), so a resume after a park, a heal
or an interruption credits them again instead of charging them to the walls. A wait its
supervisor died in (``SIGKILL``) recorded no credit: it counts up to the heal's park.
"""

from __future__ import annotations

from collections.abc import Sequence

from fractal.runtime.context import RunState
from fractal.store.ledger import Ledger
from fractal.store.timefmt import to_epoch

__all__ = ["CREDIT_EVENT", "credit_wait", "wait_credits"]

CREDIT_EVENT = "wait_credit"
"""The event recording one wait's credited seconds (metadata ``12.500``)."""


def credit_wait(ledger: Ledger, node: str, state: RunState, waited: float) -> None:
    """Move ``state``'s run and iteration deadlines ``waited`` seconds later and record the
    credit on the run (and its open iteration)."""
    if waited <= 0:
        return
    state.credit_walls(waited)
    ledger.add_event(node, CREDIT_EVENT, actor="loop", status="completed",
                     metadata=f"{waited:.3f}", run_id=state.run_id, iter_id=state.iter_id)


def wait_credits(ledger: Ledger, node: str, run_id: int, waits: Sequence[str],
                 iter_id: int | None = None) -> float:
    """Seconds of waits credited to run ``run_id`` (only those of iteration ``iter_id``
    when given): the recorded credits, plus, for a wait (an event named in ``waits``,
    ``started``) whose supervisor died before it could record its credit, the seconds
    from its start to the park that followed (the heal's ``pause`` event). A malformed
    record counts 0."""
    total, open_at, open_iter = 0.0, None, None
    for event in ledger.events_of(node, run_id, (CREDIT_EVENT, "pause", *waits)):
        if event.event == CREDIT_EVENT:
            open_at = None
            if iter_id is None or event.iter_id == iter_id:
                total += _seconds(event.meta)
        elif event.event in waits and event.status == "started":
            open_at, open_iter = to_epoch(event.created_at), event.iter_id
        elif event.event == "pause" and event.meta.startswith("parked") and open_at is not None:
            if iter_id is None or open_iter == iter_id:
                total += max(0.0, to_epoch(event.created_at) - open_at)
            open_at = None
    return total


def _seconds(text: str) -> float:
    try:
        return max(0.0, float(text))
    except ValueError:
        return 0.0
