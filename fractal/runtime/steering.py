"""What the operator asked of the running loop: the signal rows of this run, read at
every checkpoint and every wake.

The database is the source of truth; the waker only makes the loop look sooner.
"""

from __future__ import annotations

import logging

from fractal.domain.signals import Signal, winning
from fractal.store.ledger import Ledger

log = logging.getLogger(__name__)


class Park(Exception):
    """Unwind to the supervisor, which parks the run (pause): rows stay open, nothing is
    committed, the pane exits. ``step_reason`` is set when a step row was closed paused."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"paused {where}")


class Steering:
    """Reads this run's pending signals. ``stop``/``finish`` stay requested once seen."""

    def __init__(self, ledger: Ledger, run_id: int) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.stop_requested = False
        self.finish_requested = False
        self._last_good: set[str] = set()

    def pending(self) -> set[str]:
        """Names of the signals present for the run (the last good read on contention)."""
        try:
            names = {s.signal for s in self.ledger.signals(self.run_id)}
        except Exception as exc:  # a locked database must not crash the loop
            log.warning("could not read signals: %s", exc)
            return set(self._last_good)
        self._last_good = names
        if Signal.STOP.value in names:
            self.stop_requested = True
        if Signal.FINISH.value in names:
            self.finish_requested = True
        elif self.finish_requested and Signal.FINISH.value not in names:
            self.finish_requested = False  # finish --cancel withdrew it
        return names

    def pause_pending(self) -> bool:
        """True when a pause is pending (it outranks everything else)."""
        return Signal.PAUSE.value in self.pending()

    def check(self, *, allow_finish: bool = True, allow_stop: bool = True) -> Signal | None:
        """The signal that acts here (pause > finish > stop), or None."""
        return winning(self.pending(), allow_finish=allow_finish, allow_stop=allow_stop)

    def clear_pause(self) -> None:
        """Drop this run's pause rows (a resume boot consumed them)."""
        self.ledger.delete_signals(self.run_id, Signal.PAUSE.value)

    def killed(self) -> str | None:
        """The kill attribution when a kill signal is present, else None."""
        try:
            for row in self.ledger.signals(self.run_id):
                if row.signal == Signal.KILL.value:
                    return row.meta or "killed"
        except Exception:
            return None
        return None
