"""The loop's two waits: an approval gate and a finish drain.

Both poll the database on every wake (at least once a second), run a SYNC every
``wait`` window when a SYNC callback is given, and end on the first of: released
(approved / drained), paused, stopped, finished (approval only), or the deadline. Time
is the waker's clock: an approval wait burns the iteration and run walls like a step.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from fractal.control import Steering
from fractal.domain.outcome import Status
from fractal.domain.signals import Signal
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger


class WaitEnd(StrEnum):
    """How a wait ended."""

    RELEASED = "released"
    PAUSED = "paused"
    STOPPED = "stopped"
    FINISHED = "finished"  # a finish ended an approval wait (the iteration winds down)
    TIMED_OUT = "timed out"


def _wait(released: Callable[[], bool], *, steering: Steering, waker: Waker,
          deadline: float | None, window: float, sync: Callable[[], None] | None,
          finish_ends_it: bool) -> WaitEnd:
    clock = waker.clock
    next_sync = clock.monotonic() + window
    while True:
        if released():
            return WaitEnd.RELEASED
        signal = steering.check(allow_finish=finish_ends_it, allow_stop=True)
        if signal is Signal.PAUSE:
            return WaitEnd.PAUSED
        if signal is Signal.FINISH:
            return WaitEnd.FINISHED
        if signal is Signal.STOP:
            return WaitEnd.STOPPED
        now = clock.monotonic()
        if deadline is not None and now >= deadline:
            return WaitEnd.TIMED_OUT
        if sync is not None and now >= next_sync:
            sync()
            next_sync = clock.monotonic() + window
            continue
        limits = [next_sync - now] + ([deadline - now] if deadline is not None else [])
        waker.wait(max(0.0, min(limits)))


def await_approval(ledger: Ledger, step_id: int, *, steering: Steering, waker: Waker,
                   deadline: float | None, window: float,
                   sync: Callable[[], None] | None) -> WaitEnd:
    """Wait until step ``step_id`` is approved. A stop (STOPPED) or a finish (FINISHED)
    ends the wait cleanly; ``deadline`` is clock seconds (approval waits burn the clock).
    A finish is acted on in an approval wait, never in a drain (a drain is a finish)."""
    def approved() -> bool:
        row = ledger.step(step_id)
        return row is not None and bool(row.approved)

    return _wait(approved, steering=steering, waker=waker, deadline=deadline, window=window,
                 sync=sync, finish_ends_it=True)


def live_descendants(ledger: Ledger, node: str) -> list[str]:
    """Descendants of ``node`` whose loops are still running. A paused descendant is not
    waited for: it got no finish, and nothing would ever end it."""
    prefix = node + "."
    return [r.node for r in ledger.nodes() if r.node.startswith(prefix)
            and r.status is Status.ACTIVE]


def drain_children(ledger: Ledger, node: str, *, steering: Steering, waker: Waker,
                   deadline: float | None, window: float,
                   sync: Callable[[], None] | None) -> WaitEnd:
    """Wait until no descendant of ``node`` is still running (a finish drain, bounded by
    the run wall alone). A pause, a stop (the run then ends stopped) or the deadline end
    it early."""
    return _wait(lambda: not live_descendants(ledger, node), steering=steering, waker=waker,
                 deadline=deadline, window=window, sync=sync, finish_ends_it=False)
