"""The loop's clock: the one place a run reads the time and waits.

Every deadline of a run (the run, iteration and step time walls, a retry backoff, the
pacing sleep, an approval wait, the final-event grace) is a ``Clock.monotonic()`` value
in seconds, every wall-clock instant a ``Clock.time()`` value in epoch seconds, and every
wait blocks in ``Clock.wait``. The supervisor builds the loop with ``SystemClock``; a test
builds it with a fake whose ``wait`` advances its own time, so a run of hours takes
milliseconds. No other module of the loop reads ``time.monotonic()`` or ``time.time()``;
only the process plumbing (``processes.py``, ``commands.py``) times real processes with
the system clock, since a real process runs in real time.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from datetime import UTC, datetime
from typing import Protocol

from fractal.store.timefmt import format_ts

__all__ = ["TRACE_ENV", "Clock", "SystemClock", "monotonic_to_epoch", "stamp", "trace",
           "trace_now"]

TRACE_ENV = "FRACTAL_TRACE"  # names a file: append timing points to it (make bench)


class Clock(Protocol):
    """Time as the loop sees it. Durations and instants are seconds (floats)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines are on it)."""
        ...

    def time(self) -> float:
        """Wall-clock time in epoch seconds (for ``*_END_EPOCH`` and pause credit)."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Block until ``event`` is set or ``timeout`` seconds (>= 0) passed; True when set."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time`` and ``Event.wait``."""

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """``event.wait(timeout)``."""
        return event.wait(timeout)


def monotonic_to_epoch(clock: Clock, deadline: float | None) -> float | None:
    """The epoch second at which the monotonic ``deadline`` falls (None stays None)."""
    if deadline is None:
        return None
    return clock.time() + (deadline - clock.monotonic())


def stamp(clock: Clock) -> str:
    """The clock's wall time in the ledger's format (``YYYY-MM-DDTHH:MM:SS.mmmZ``, UTC)."""
    return format_ts(datetime.fromtimestamp(clock.time(), UTC))


def trace(point: str, step_id: int, at_ns: int | None = None) -> None:
    """Append ``<point> <monotonic ns> <step_id>`` to the file named by ``$FRACTAL_TRACE``.

    A benchmark hook (``scripts/bench.py``, docs/benchmarks.md): it measures the real
    machine, so it reads the system's monotonic clock, whatever clock drives the run.
    Points: ``open`` (just before the step row is booked; ``at_ns`` carries that earlier
    time), ``spawn`` (the agent's process exists), ``exit`` (the waiter saw it exit),
    ``closed`` (the row is closed). Unset, it costs one environment lookup. Never raises:
    an unwritable trace file is skipped.
    """
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    ns = time.monotonic_ns() if at_ns is None else at_ns
    with contextlib.suppress(OSError), open(path, "a", encoding="ascii") as fh:
        fh.write(f"{point} {ns} {step_id}\n")


def trace_now() -> int:
    """The system's monotonic nanoseconds, for a ``trace`` point taken before its id exists."""
    return time.monotonic_ns()
