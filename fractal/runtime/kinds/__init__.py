"""The step kinds, as one static table: ``KINDS`` lists them in claim order.

The iteration runner asks each row in turn whether it claims a step (from the step's
frontmatter); the first that does runs it, after the SYNC pseudo-step when it asks for
one. A row whose ``run`` returns None passes the step on to the next row that claims it
(the children wait, once released). The agent step claims every step, so it is the last
row: the fallback.

A new kind is one module under ``runtime/kinds/`` with a ``KindPart`` class of the
``StepKind`` shape (``base.py``) and one row here.
"""

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
