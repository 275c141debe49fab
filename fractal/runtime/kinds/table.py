"""The step kinds as one static table: ``KINDS`` lists them in claim order (the package
docstring says how a step finds its kind). Apart from the package's ``__init__`` so that
importing one kind's module, or the shared ``base``, does not load every kind."""

from __future__ import annotations

from fractal.runtime.kinds.agent import AgentStep
from fractal.runtime.kinds.checkgate import CheckGate
from fractal.runtime.kinds.children import ChildrenWait
from fractal.runtime.kinds.kit import KindPart
from fractal.runtime.kinds.pool import PoolDispatch

__all__ = ["KINDS"]

KINDS: tuple[type[KindPart], ...] = (
    ChildrenWait,  # `wait: children`: holds the step, then passes it on
    PoolDispatch,  # `pool: dispatch`: fractal dispatches the pool's workers, no agent
    CheckGate,  # `check: <command>`: a command instead of an agent, with its fix cycle
    AgentStep,  # everything else: agent launches (the fallback row)
)
"""Every step kind, in claim order."""
