"""The loop's four waits: an approval gate, a finish drain, a ``wait: children`` step and
the run's end held for a hand-back's re-merge.

Each polls the database on every wake (at least once a second), calls its SYNC callback
every ``wait`` window when one is given (a look: the callback launches a SYNC only when
the tree holds news, ``Sync.while_waiting``), and ends on the first of: released
(approved / drained / merged), paused, stopped, finished (approval and children only),
or the deadline (and a children wait on the node's own ``node done``). Time
is the waker's clock: an approval wait burns the iteration and run walls like a step.
The deadline may be a callable read on every wake (a SYNC that waited out a usage
window credited that time to the walls, so the deadline moved); a SYNC callback that
returns True ends the wait ``stopped`` (the run ends: ``on_usage_limit: stop`` or a
usage window past ``max_usage_wait``).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TypeAlias

from fractal.control import Steering
from fractal.domain.run.outcome import Status
from fractal.domain.signals import Signal
from fractal.domain.steps.waits import WaitingChild, children_waited
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger

Deadline: TypeAlias = float | Callable[[], float | None] | None
"""A wait's deadline in clock seconds: fixed, read on every wake, or none."""
WaitSync: TypeAlias = Callable[[], bool]
"""The look (and SYNC, when there is news) a wait runs every window; True when the run
ends (the wait stops)."""


def _at(deadline: Deadline) -> float | None:
    return deadline() if callable(deadline) else deadline


class WaitEnd(StrEnum):
    """How a wait ended."""

    RELEASED = "released"
    PAUSED = "paused"
    STOPPED = "stopped"
    FINISHED = "finished"  # a finish ended an approval wait (the iteration winds down)
    DONE = "done"  # the node's own ``node done`` ended a children wait (its run ends)
    TIMED_OUT = "timed out"


def _wait(released: Callable[[], bool], *, steering: Steering, waker: Waker,
          deadline: Deadline, window: float, sync: WaitSync | None,
          finish_ends_it: bool, urgent: Callable[[], bool] | None = None,
          poll: float = 1.0, look_at_once: bool = False, done_ends_it: bool = False) -> WaitEnd:
    clock = waker.clock
    next_sync = clock.monotonic() + (0.0 if look_at_once else window)
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
        if signal is Signal.DONE and done_ends_it:
            return WaitEnd.DONE
        now, until = clock.monotonic(), _at(deadline)
        if until is not None and now >= until:
            return WaitEnd.TIMED_OUT
        if sync is not None and (now >= next_sync or (urgent is not None and urgent())):
            if sync():
                return WaitEnd.STOPPED
            next_sync = clock.monotonic() + window
            continue
        # Without a SYNC the window is no timer (a past one would spin); wake at least
        # every ``poll`` seconds to read the database.
        limits = ([next_sync - now] if sync is not None else [poll]) + \
            ([until - now] if until is not None else [])
        waker.wait(max(0.0, min(limits)), poll=poll)


def await_approval(ledger: Ledger, step_id: int, *, steering: Steering, waker: Waker,
                   deadline: Deadline, window: float,
                   sync: WaitSync | None) -> WaitEnd:
    """Wait until step ``step_id`` is approved. A stop (STOPPED) or a finish (FINISHED)
    ends the wait cleanly; ``deadline`` is clock seconds (approval waits burn the clock).
    A finish is acted on in an approval wait, never in a drain (a drain is a finish)."""
    def approved() -> bool:
        row = ledger.step(step_id)
        return row is not None and bool(row.approved)

    return _wait(approved, steering=steering, waker=waker, deadline=deadline, window=window,
                 sync=sync, finish_ends_it=True, poll=waker.idle_poll)


def await_released(released: Callable[[], bool], *, steering: Steering, waker: Waker,
                   deadline: float | None) -> WaitEnd:
    """Wait until ``released()`` holds (polled on every wake, at least once a second); a
    pause, a stop, a finish or ``deadline`` (clock seconds) end it early. No SYNC runs."""
    return _wait(released, steering=steering, waker=waker, deadline=deadline, window=0.0,
                 sync=None, finish_ends_it=True)


def live_descendants(ledger: Ledger, node: str) -> list[str]:
    """Descendants of ``node`` whose loops are still running. A paused descendant is not
    waited for: it got no finish, and nothing would ever end it."""
    prefix = node + "."
    return [r.node for r in ledger.nodes() if r.node.startswith(prefix)
            and r.status is Status.ACTIVE]


def drain_children(ledger: Ledger, node: str, *, steering: Steering, waker: Waker,
                   deadline: Deadline, window: float,
                   sync: WaitSync | None) -> WaitEnd:
    """Wait until no descendant of ``node`` is still running (a finish drain, bounded by
    the run wall alone). A pause, a stop (the run then ends stopped) or the deadline end
    it early."""
    return _wait(lambda: not live_descendants(ledger, node), steering=steering, waker=waker,
                 deadline=deadline, window=window, sync=sync, finish_ends_it=False)


def await_children(ledger: Ledger, node: str, *, steering: Steering, waker: Waker,
                   deadline: Deadline, window: float,
                   sync: WaitSync | None) -> WaitEnd:
    """Wait until no direct child of ``node`` is live (``wait: children``). A pause, a
    stop, a finish, the node's own ``node done`` (DONE: done never waits for the children)
    or ``deadline`` (clock seconds: the wait burns the walls) end it early.
    A child gate that starts pending runs the look at once (each gate once), so the agent
    can approve it without waiting for the next window."""
    seen: set[int] = set()

    def urgent() -> bool:
        fresh = {s for child in waited_children(ledger, node)
                 for s in _open_gates(ledger, child)} - seen
        seen.update(fresh)
        return bool(fresh)

    return _wait(lambda: not waited_children(ledger, node), steering=steering, waker=waker,
                 deadline=deadline, window=window, sync=sync, finish_ends_it=True,
                 urgent=urgent, done_ends_it=True)


def await_hand_backs(pending: Callable[[], list[str]], *, settled: Callable[[], set[str]],
                     steering: Steering, waker: Waker, deadline: Deadline, window: float,
                     sync: WaitSync | None) -> WaitEnd:
    """Wait until ``pending()`` (the children whose hand-back the node has not merged
    again) is empty: the run's end held for a re-merge. The first look runs at once (a
    child may have settled already), then every ``window``, and at once whenever one of
    ``settled()`` (those children whose loops have settled, so a merge may take them) was
    not settled at the previous look: the agent merges it without waiting out the window.
    A pause, a stop or ``deadline`` (clock seconds: the run wall) end it early; a finish
    does not (a finish is a wind-down, and merging the hand-back is the wind-down's work),
    it stays pending."""
    before: set[str] = set()

    def urgent() -> bool:
        nonlocal before
        now = settled()
        fresh, before = now - before, now
        return bool(fresh)

    return _wait(lambda: not pending(), steering=steering, waker=waker, deadline=deadline,
                 window=window, sync=sync, finish_ends_it=False, urgent=urgent,
                 poll=waker.idle_poll, look_at_once=True)


def waited_children(ledger: Ledger, node: str) -> list[str]:
    """The direct children of ``node`` a ``wait: children`` still holds for."""
    return children_waited(node, [(r.node, r.status) for r in ledger.nodes()])


def waiting_children(ledger: Ledger, node: str) -> list[WaitingChild]:
    """The children a wait holds for, each marked when one of its gates is pending, when
    it is idle and never ran, and when a merge of it was handed back to it."""
    # deferred: start-up cost: only a wait reads them (3 modules)
    from fractal.domain.attention.facts import is_hand_back
    from fractal.store.reader import newest_merges  # deferred: start-up cost (1 module)

    statuses = {r.node: r.status for r in ledger.nodes()}
    live = children_waited(node, list(statuses.items()))
    merges = newest_merges(ledger.db_path, live) if live else {}
    return [WaitingChild(b, statuses[b], bool(_open_gates(ledger, b)),
                         never_started=statuses[b] is Status.IDLE and ledger.last_run(b) is None,
                         handed_back=b in merges and merges[b].status == "failed"
                         and is_hand_back(merges[b].reason))
            for b in live]


def _open_gates(ledger: Ledger, node: str) -> list[int]:
    """Step ids of ``node``'s gates waiting (or parked) unapproved."""
    return [s.step_id for s in ledger.pending_approvals(node)
            if s.status in (Status.ACTIVE, Status.PAUSED)]
