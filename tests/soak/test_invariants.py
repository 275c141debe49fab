"""The pool checker of the soak (``invariants.check_pool``) on hand-made rows: what it
must accept and what it must report (a checker mistake is a false violation)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.soak.invariants import check_pool

POOL = "main.pool"
T = "2026-01-01T00:00:{:02d}.000Z"

# (item_id, status, attempts, [(start second, end second or None), ...] of its worker)
Items = list[tuple[str, str, int, list[tuple[int, int | None]]]]

CASES: list[tuple[str, Items, tuple[str, str] | None, int, list[str]]] = [
    ("clean", [("i1", "done", 1, [(1, 5)]), ("i2", "failed", 2, [(1, 3), (4, 6)])],
     ("completed", "pool: 1 done, 1 failed"), 0, []),
    ("runs-overlap", [("i1", "done", 2, [(1, 5), (4, 8)])],
     ("completed", "pool: 1 done, 0 failed"), 0, ["runs overlap"]),
    ("a-run-left-open", [("i1", "done", 2, [(1, None), (4, 8)])],
     ("completed", "pool: 1 done, 0 failed"), 0, ["runs overlap"]),
    ("more-runs-than-attempts", [("i1", "done", 1, [(1, 2), (3, 4)])],
     ("completed", "pool: 1 done, 0 failed"), 0, ["attempts are not its runs"]),
    ("unannounced-attempt", [("i1", "done", 2, [(1, 2)])],
     ("completed", "pool: 1 done, 0 failed"), 0, ["without a worker run"]),
    ("announced-attempt", [("i1", "done", 2, [(1, 2)])],
     ("completed", "pool: 1 done, 0 failed"), 1, []),
    ("item-lost", [("i1", "done", 1, [(1, 2)]), ("i2", "open", 1, [(1, 2)])],
     ("completed", "pool: 1 done, 0 failed"), 0, ["not done or failed"]),
    ("wrong-reason", [("i1", "done", 1, [(1, 2)])],
     ("completed", "pool: 2 done, 0 failed"), 0, ["items say 1 done"]),
    ("parked-pool-with-claims", [("i1", "claimed", 1, [(1, None)]), ("i2", "open", 0, [])],
     None, 0, []),
]


def _db(path: Path, items: Items, end: tuple[str, str] | None) -> Path:
    db = path / "fractal.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE pool_items (pool TEXT, item_id TEXT, position INT, status TEXT, "
        "attempts INT, worker TEXT);"
        "CREATE TABLE runs (run_id INTEGER PRIMARY KEY, node TEXT, status TEXT, "
        "metadata TEXT, started_at TEXT, ended_at TEXT);")
    for position, (item_id, status, attempts, runs) in enumerate(items):
        worker = f"{POOL}.{item_id}" if runs or status != "open" else None
        con.execute("INSERT INTO pool_items VALUES (?, ?, ?, ?, ?, ?)",
                    (POOL, item_id, position, status, attempts, worker))
        for start, stop in runs:
            con.execute("INSERT INTO runs (node, status, metadata, started_at, ended_at) "
                        "VALUES (?, 'completed', '', ?, ?)",
                        (worker, T.format(start), None if stop is None else T.format(stop)))
    con.execute("INSERT INTO runs (node, status, metadata, started_at, ended_at) VALUES "
                "(?, ?, ?, ?, ?)", (POOL, end[0] if end else "completed", end[1] if end else "",
                                    T.format(0), T.format(59) if end else None))
    con.commit()
    con.close()
    return db


@pytest.mark.parametrize(("name", "items", "end", "unstarted", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_check_pool(tmp_path: Path, name: str, items: Items, end: tuple[str, str] | None,
                    unstarted: int, expected: list[str]) -> None:
    found = [v.detail for v in check_pool(_db(tmp_path, items, end), POOL,
                                          unstarted=unstarted)]
    assert len(found) == len(expected), found
    for detail, text in zip(found, expected, strict=True):
        assert text in detail, (name, found)
