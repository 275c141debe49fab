"""Check rows (exit checks and gate steps): the frozen row value and the fast, read-only query behind
``fractal node checks``. Stdlib only, like ``reader``: read commands never import
SQLAlchemy.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from fractal.store.reader import _connect
from fractal.store.rows import build

__all__ = ["CheckRow", "checks"]


class CheckRow(NamedTuple):
    """One check the loop ran, with its iteration number and gate step joined in.

    ``kind`` is ``exit`` or ``gate``; ``signature`` is '' when it passed; ``failures`` and
    ``passed`` are None when unknown; ``duration`` is seconds (3 dp); ``iter``, ``step`` and
    ``step_name`` are None when there is no such row (an exit check has no step);
    ``score`` the score it reported, None when none.
    """

    check_id: int
    node: str
    run_id: int
    iter_id: int | None
    iter: int | None
    step_id: int | None
    step: int | None
    step_name: str | None
    kind: str
    command: str
    exit_code: int
    signature: str
    failures: int | None
    passed: int | None
    output_path: str | None
    started_at: str
    ended_at: str
    duration: float
    score: float | None = None


_SELECT = """
SELECT c.*, i.iter AS iter, s.step AS step, s.step_name AS step_name,
       ROUND((julianday(c.ended_at) - julianday(c.started_at)) * 86400.0, 3) AS duration
  FROM checks c
  LEFT JOIN iterations i ON i.iter_id = c.iter_id
  LEFT JOIN steps s ON s.step_id = c.step_id
"""


def checks(db_path: Path, node: str, run_id: int | None = None) -> list[CheckRow]:
    """The node's check rows, oldest first; only run ``run_id``'s when it is given.

    Raises StoreError when the database cannot be read.
    """
    sql = _SELECT + " WHERE c.node = ?"
    params: list[object] = [node]
    if run_id is not None:
        sql += " AND c.run_id = ?"
        params.append(run_id)
    with _connect(db_path) as conn:
        return [build(CheckRow, row) for row in conn.execute(sql + " ORDER BY c.check_id",
                                                             params)]
