"""The backstop's ``git status``, started as soon as the iteration's last agent is gone.

The backstop commit that closes an iteration asks git for the worktree's status, a git
process of a few milliseconds. The agent step arms a ``StatusAhead`` when it is the
iteration's last step; the launch of that step starts the status once its agent exited
and every leftover process was swept (``launch.run_attempt``), so git runs while the
step's row is closed and its banner written, and the backstop takes the answer.

It is a guess that the iteration left changes for the backstop (an agent that commits
its own work, as the prompt asks, leaves none, and an early answer of "nothing changed"
cannot stand: a file changed after it started would be missed, so the backstop asks git
again). So it is made only while the last backstop found something to commit (and for
the run's first iteration): a run whose iterations end clean pays one git process per
boundary, not two.

The answer is used only when nothing but the files could have moved it: it was started
after the last agent of the iteration ended (a spawn voids it), at most FRESH_SECONDS
before it is taken (a usage-window or approval wait in between voids it), and the
backstop's own check that the index, ``HEAD`` and the branch ref are as they were when
it started passes (``workspace.status_ahead.PendingStatus``). Anything else asks git
again. The git process is always collected.
"""

from __future__ import annotations

from pathlib import Path

from fractal.runtime.clock import Clock
from fractal.workspace.status_ahead import PendingStatus, start_worktree_status

__all__ = ["FRESH_SECONDS", "StatusAhead"]

FRESH_SECONDS = 1.0
"""Seconds (the loop's clock) a status started ahead stays usable: the moment between a
step's end and its iteration's backstop, not a wait."""


class StatusAhead:
    """One worktree's status started ahead (see the module docstring). Not thread-safe:
    the loop's thread alone calls it."""

    def __init__(self, worktree: Path | None = None, clock: Clock | None = None) -> None:
        self.worktree = worktree  # None (or no clock): never starts a status
        self.clock = clock
        self.armed = False  # the attempts now running belong to the iteration's last step
        self.worth = True  # the last backstop found changes (or none ran yet): guess again
        self._pending: PendingStatus | None = None
        self._started = 0.0

    def arm(self, armed: bool = True) -> None:
        """Start (True) or stop (False) starting a status after each attempt's end."""
        self.armed = armed

    def backstop_found(self, changes: bool) -> None:
        """The backstop that closed the iteration found something to commit (``changes``:
        it committed, or tried to) or not: whether the next iteration's guess is made."""
        self.worth = changes

    def agent_gone(self) -> None:
        """An armed attempt's agent and its leftovers are gone: start the status now (while
        the last backstop found changes)."""
        if not self.armed or not self.worth or self.worktree is None or self.clock is None:
            return
        self.discard()
        self._pending = start_worktree_status(self.worktree)
        self._started = self.clock.monotonic()

    def agent_starting(self) -> None:
        """An agent is about to start: a status taken before it is stale."""
        self.discard()

    def take(self) -> PendingStatus | None:
        """The status started ahead, if still fresh (the caller collects it), else None."""
        pending, self._pending = self._pending, None
        if pending is not None and self.clock is not None \
                and self.clock.monotonic() - self._started > FRESH_SECONDS:
            pending.discard()
            return None
        return pending

    def discard(self) -> None:
        """Collect the git process of a status nobody will use."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.discard()
