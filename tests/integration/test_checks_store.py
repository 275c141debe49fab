"""Check rows: booked through CheckBook, read back by the fast reader (with the joined
iteration and gate step), listed by ``node_checks`` with its trend, and shown in the
``activity`` view."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fractal.lifecycle.reads.checks import TrendPoint, failing_trend
from fractal.store import reader
from fractal.store.checkbook import CheckBook
from fractal.store.checkrows import CheckRow, checks
from fractal.store.ledger import Ledger
from fractal.store.timefmt import utc_now

NODE = "main.fixer"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tree" / "fractal.db"


def _book(book: CheckBook, run: int, it: int | None, step_id: int | None, code: int,
          signature: str, failures: int | None, kind: str = "exit") -> int:
    return book.book_check(node=NODE, run_id=run, iter_id=it, step_id=step_id, kind=kind,
                           command="pytest -q", exit_code=code, signature=signature,
                           failures=failures, passed=3 - (failures or 0),
                           output_path=f"/n/tmp/checks/{run}-{it}.log", started_at=utc_now())


def test_book_and_read_back(db: Path) -> None:
    ledger = Ledger(db)
    book = CheckBook(db)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    it1 = ledger.open_iteration(NODE, run, 1, agent="stub", model=None)
    gate = ledger.open_step(node=NODE, run_id=run, iter_id=it1, step=4, step_name="CHECK",
                            agent=None, model=None, session=None)
    first = _book(book, run, it1, gate, 1, "t.py::test_b", 2, kind="gate")
    _book(book, run, it1, None, 1, "t.py::test_b", 2)
    it2 = ledger.open_iteration(NODE, run, 2, agent="stub", model=None)
    _book(book, run, it2, None, 0, "", 0)
    # three bookings may land in one millisecond: give each its own instant, in order
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE checks SET ended_at = strftime('%Y-%m-%dT%H:%M:%fZ', started_at, "
                    "'+' || check_id || ' seconds')")
    con.close()

    rows = checks(db, NODE)
    assert [(r.kind, r.iter, r.step, r.step_name, r.exit_code, r.signature, r.failures)
            for r in rows] == [("gate", 1, 4, "CHECK", 1, "t.py::test_b", 2),
                               ("exit", 1, None, None, 1, "t.py::test_b", 2),
                               ("exit", 2, None, None, 0, "", 0)]
    assert rows[0].check_id == first and isinstance(rows[0], CheckRow)
    assert all(r.duration >= 0 and r.passed == 3 - (r.failures or 0) for r in rows)
    assert checks(db, NODE, run_id=run + 1) == []
    assert checks(db, "main.other") == []

    shown = [r for r in reader.activity(db, [NODE], None) if r.kind == "check"]
    assert [(r.event, r.iter, r.step, r.status, r.exit_code, r.meta) for r in shown] == [
        ("exit-check", 2, None, "passed", 0, "pytest -q"),
        ("exit-check", 1, None, "failed", 1, "pytest -q | t.py::test_b"),
        ("gate", 1, 4, "failed", 1, "pytest -q | t.py::test_b"),
    ]


@pytest.mark.parametrize(("rows", "trend"), [
    ([], []),
    ([{"ref": "3.1", "failures": 4}, {"ref": "3.1", "failures": 2},
      {"ref": "3.2", "failures": None}, {"ref": "3.3", "failures": 0}],
     [TrendPoint("3.1", 2), TrendPoint("3.2", None), TrendPoint("3.3", 0)]),
])
def test_failing_trend_keeps_the_last_check_of_each_iteration(
        rows: list[dict[str, object]], trend: list[TrendPoint]) -> None:
    assert failing_trend(rows) == trend


def test_the_trend_line_adds_scores_when_a_check_reported_one() -> None:
    from fractal.lifecycle.reads.checks import ChecksReport

    rows: list[dict[str, object]] = [
        {"ref": "3.1", "failures": 2, "score": 0.5}, {"ref": "3.2", "failures": None},
        {"ref": "3.3", "failures": 0, "score": 0.715}]
    report = ChecksReport(NODE, rows, failing_trend(rows))
    assert report.trend == [TrendPoint("3.1", 2, 0.5), TrendPoint("3.2", None),
                            TrendPoint("3.3", 0, 0.715)]
    assert report.trend_line() == ("failing per iteration: 3.1 2 -> 3.2 ? -> 3.3 0\n"
                                   "score per iteration: 3.1 0.5 -> 3.2 ? -> 3.3 0.715")
    plain = ChecksReport(NODE, rows[1:2], failing_trend(rows[1:2]))
    assert plain.trend_line() == "failing per iteration: 3.2 ?"


def test_restore_track_rebuilds_the_streak_and_the_newest_output(db: Path,
                                                                 tmp_path: Path) -> None:
    from fractal.domain.checks.progress import Streak
    from fractal.runtime.checkrestore import restore_track

    ledger, book = Ledger(db), CheckBook(db)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    log = tmp_path / "gate.log"
    log.write_text("\n".join(f"line {n}" for n in range(1, 301)) + "\n")
    for number in (1, 2):
        it = ledger.open_iteration(NODE, run, number, agent="stub", model=None)
        _book(book, run, it, None, 1, "t.py::test_b", 2)
    book.book_check(node=NODE, run_id=run, iter_id=it, step_id=None, kind="gate",
                    command="ruff check", exit_code=1, signature="F401 x", failures=1,
                    passed=None, output_path=str(log), started_at=utc_now())

    track = restore_track(db, NODE, run, no_progress=3)
    assert track.streak == Streak("t.py::test_b", 2, 2)
    assert (track.passed, track.stalled) == (None, None)
    last = track.last
    assert last is not None and (last.kind.value, last.command, last.iteration) == (
        "gate", "ruff check", 2)
    assert last.tail.splitlines()[0] == "line 101" and len(last.tail.splitlines()) == 200
    # No progress is not carried over: the resumed run goes on (a pause outranked it).
    assert restore_track(db, NODE, run, no_progress=2).stalled is None
    assert restore_track(db, NODE, run + 1, no_progress=2) == restore_track(
        db, "main.none", run, no_progress=2)
