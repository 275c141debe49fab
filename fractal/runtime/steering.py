"""How the loop unwinds when a pause acts: ``Park``. What the operator asked of the run
is read by ``fractal.control.Steering`` (re-exported here), beside the verbs' writes.
"""

from __future__ import annotations

from fractal.control import Steering

__all__ = ["Park", "Steering"]


class Park(Exception):
    """Unwind to the supervisor, which parks the run (pause): rows stay open, nothing is
    committed, the pane exits. ``where`` says where the loop stood (``during PLAN``)."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"paused {where}")
