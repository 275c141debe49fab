"""The wiring every part of one run's loop shares: one clock, one launcher, one budget
guard, beside the run's ``Boot`` and ``RunState`` (``runtime/context.py``).

Apart from the state so that the budget guard, which reads the state, and the wiring,
which holds the guard, do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractal.runtime.budgetguard import BudgetGuard
from fractal.runtime.clock import Clock
from fractal.runtime.context import Boot, RunState
from fractal.runtime.launcher import Launcher
from fractal.runtime.pane import Reporter
from fractal.runtime.steering import Steering
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger

__all__ = ["LoopPart", "LoopParts"]


@dataclass(frozen=True)
class LoopParts:
    """The collaborators every part of one run's loop shares."""

    boot: Boot
    state: RunState
    ledger: Ledger
    reporter: Reporter
    waker: Waker
    steering: Steering
    clock: Clock
    launcher: Launcher
    budget: BudgetGuard


class LoopPart:
    """Base of the loop's parts (RunLoop, IterationRunner, the step kinds, Launches, Sync):
    one wiring."""

    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts
        self.boot, self.state, self.ledger = parts.boot, parts.state, parts.ledger
        self.reporter, self.waker, self.steering = parts.reporter, parts.waker, parts.steering
        self.clock, self.budget = parts.clock, parts.budget
