"""The ``activity`` view, read through the fast reader: starts, ends, durations, cost sums."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.store import reader
from fractal.store.db import transaction
from fractal.store.ledger import Ledger
from fractal.store.rows import ActivityRow
from tests import ledgersql

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

NODE = "main.lexer"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "fractal.db")


def _key(row: ActivityRow) -> tuple[str, str, int | None]:
    ident = {"run": row.run_id, "iteration": row.iter, "step": row.step_id}.get(row.kind)
    return row.kind, row.event, ident


def _two_iterations(ledger: Ledger) -> dict[str, int]:
    """Run (cap $12.5) > iter 1 (steps $1 + $2.5) > iter 2 (no costs) + a drain SYNC ($0.25)."""
    run = ledger.open_run(NODE, agent="claude", max_cost=12.5, parent_run_id=None)
    ids = {"run": run}
    for number, costs in ((1, (1.0, 2.5)), (2, (None, None))):
        it = ledger.open_iteration(NODE, run, number, agent="claude", model="opus")
        ids[f"iter{number}"] = it
        for position, (name, cost) in enumerate(zip(("PLAN", "EXECUTE"), costs, strict=True)):
            step = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=position + 1,
                                    step_name=name, agent="claude", model="opus", session=None)
            ids[f"{number}.{name}"] = step
            ledger.close_step(step, "completed", 0, "", cost=cost)
        ledger.close_iteration(it, "completed", 0, "")
    drain = ledger.book_closed_step(node=NODE, run_id=run, iter_id=None, step=0,
                                    step_name="SYNC", status="completed", exit_code=0,
                                    reason="", cost=0.25)
    ids["drain"] = drain
    ledger.add_event(NODE, "commit", actor="operator", metadata="abc123", run_id=run,
                     iter_id=ids["iter1"], step_id=ids["1.EXECUTE"])
    ledger.close_run(run, "completed", 0, "Reached max iterations (2)")
    return ids


def test_run_with_two_iterations_sums_costs_and_keeps_null(ledger: Ledger) -> None:
    ids = _two_iterations(ledger)
    rows = reader.activity(ledger.db_path, [NODE], None)
    by_key = {_key(r): r for r in rows}
    assert len(rows) == 2 + 2 * 2 + 4 * 2 + 2 + 1  # run, iterations, steps, drain, event

    run_start, run_end = by_key["run", "start", ids["run"]], by_key["run", "end", ids["run"]]
    assert (run_start.status, run_start.meta, run_start.cost) == ("active", "max_cost $12.5",
                                                                  None)
    assert (run_end.status, run_end.exit_code, run_end.meta) == ("completed", 0,
                                                                 "Reached max iterations (2)")
    assert run_end.cost == pytest.approx(3.75)  # every step of the run, drain SYNC included
    assert run_end.duration is not None and run_end.duration >= 0

    assert by_key["iteration", "end", 1].cost == pytest.approx(3.5)
    assert by_key["iteration", "end", 2].cost is None  # all NULL stays NULL, never 0
    assert by_key["iteration", "start", 2].status == "active"

    step_end = by_key["step", "end", ids["1.EXECUTE"]]
    assert (step_end.iter, step_end.step, step_end.step_name, step_end.cost) == (
        1, 2, "EXECUTE", 2.5)
    assert by_key["step", "end", ids["2.PLAN"]].cost is None
    assert all(r.status == "active" and r.duration is None and r.cost is None
               for r in rows if r.event == "start")
    drain = by_key["step", "end", ids["drain"]]
    assert (drain.iter, drain.step, drain.step_name, drain.duration) == (None, 0, "SYNC", 0.0)

    event = by_key["event", "commit", None]
    assert (event.actor, event.meta, event.iter, event.step, event.step_name) == (
        "operator", "abc123", 1, 2, "EXECUTE")
    assert event.event_id is not None


@pytest.mark.parametrize(("cap", "meta"), [(None, ""), (100.0, "max_cost $100"),
                                           (0.5, "max_cost $0.5")])
def test_run_start_metadata_names_the_cap(ledger: Ledger, cap: float | None, meta: str) -> None:
    ledger.open_run(NODE, agent=None, max_cost=cap, parent_run_id=None)
    (start,) = reader.activity(ledger.db_path, [NODE], None)
    assert (start.kind, start.event, start.meta) == ("run", "start", meta)


def test_durations_come_from_the_instants_and_order_is_newest_first(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    reader.node_rows(db)  # first use creates the schema
    with ledgersql.connect(db) as conn:
        conn.execute("INSERT INTO runs (run_id, node, status, started_at, ended_at) VALUES "
                     "(1, 'main.a', 'exited', '2026-01-01T00:00:00.000Z', "
                     "'2026-01-01T01:00:01.250Z')")
        conn.execute("INSERT INTO iterations (iter_id, node, run_id, iter, status, started_at, "
                     "ended_at) VALUES (1, 'main.a', 1, 1, 'failed', "
                     "'2026-01-01T00:00:00.100Z', '2026-01-01T00:10:00.100Z')")
        conn.execute("INSERT INTO steps (step_id, node, run_id, iter_id, step, step_name, "
                     "status, started_at, ended_at) VALUES (1, 'main.a', 1, 1, 1, 'PLAN', "
                     "'exited', '2026-01-01T00:00:00.200Z', '2026-01-01T00:00:30.323Z')")
        conn.execute("INSERT INTO runs (run_id, node, status, started_at) VALUES "
                     "(2, 'main.b', 'active', '2026-01-01T00:00:05.000Z')")
    rows = reader.activity(db, None, None)
    assert [(r.node, r.kind, r.event, r.duration) for r in rows] == [
        ("main.a", "run", "end", 3601.25),
        ("main.a", "iteration", "end", 600.0),
        ("main.a", "step", "end", 30.123),
        ("main.b", "run", "start", None),
        ("main.a", "step", "start", None),
        ("main.a", "iteration", "start", None),
        ("main.a", "run", "start", None),
    ]
    assert [r.event for r in reader.activity(db, None, 2)] == ["end", "end"]
    assert [r.node for r in reader.activity(db, ["main.b"], None)] == ["main.b"]
    assert reader.activity(db, [], None) == []


def _crowded_history(db: Path) -> None:
    """Two nodes' rows of every kind on four instants only, so ties are everywhere."""
    instants = [f"2026-12-01T10:00:0{n}.000Z" for n in range(4)]
    with transaction(db) as tx:  # one write transaction, through the seam: any backend
        for n, node in enumerate(("main.a", "main.b")):
            start, end = instants[n], instants[n + 2]
            run = tx.insert("runs", {"node": node, "agent": "command", "status": "completed",
                                     "started_at": start, "ended_at": end})
            for number in (1, 2):
                it = tx.insert("iterations", {"node": node, "run_id": run, "iter": number,
                                              "status": "completed", "started_at": start,
                                              "ended_at": instants[number + 1]})
                for position in (1, 2):
                    step = tx.insert("steps", {
                        "node": node, "iter_id": it, "run_id": run, "step": position,
                        "step_name": "S", "status": "completed", "started_at": start,
                        "ended_at": instants[position + 1]})
                tx.insert("events", {"node": node, "run_id": run, "iter_id": it,
                                     "step_id": step, "event": "commit", "created_at": end})
                tx.insert("checks", {"node": node, "run_id": run, "iter_id": it, "kind": "exit",
                                     "command": "true", "exit_code": 0, "started_at": start,
                                     "ended_at": end})
        # An open run: no end row, a start on the newest instant.
        tx.insert("runs", {"node": "main.a", "agent": "command", "status": "active",
                           "started_at": instants[3]})


@pytest.mark.parametrize("nodes", [None, ["main.a"], ["main.b"], ["main.ghost"]])
def test_a_limited_listing_is_the_head_of_the_full_one(ledger: Ledger,
                                                       nodes: list[str] | None) -> None:
    """The --limit fast path (newest instants first, then a timestamp range) returns
    exactly the first rows of the unlimited listing, ties included (migration 0005)."""
    reader.node_rows(ledger.db_path)  # schema at head
    _crowded_history(ledger.db_path)
    full = reader.activity(ledger.db_path, nodes, None)
    expected = {None: 37, "main.a": 19, "main.b": 18, "main.ghost": 0}
    assert len(full) == expected[nodes[0] if nodes else None]
    for limit in range(1, len(full) + 3):
        assert reader.activity(ledger.db_path, nodes, limit) == full[:limit], limit


def _unpriced_run(ledger: Ledger, node: str, priced: float | None) -> tuple[int, int]:
    """A run of one iteration: a gate check (never launched, a known $0), an agent step
    launched without a cost and, when ``priced`` is set, a launched step that reported it."""
    ledger.register_node(node, parent="main", title=None, worktree=None)
    run = ledger.open_run(node, agent="stub", max_cost=None, parent_run_id=None)
    it = ledger.open_iteration(node, run, 1, agent="stub", model=None)
    ledger.book_closed_step(node=node, run_id=run, iter_id=it, step=1, step_name="CHECK",
                            status="completed", exit_code=0, reason="", cost=0.0)
    for position, cost in ((2, None), (3, priced)):
        if position == 3 and priced is None:
            break
        step = ledger.open_step(node=node, run_id=run, iter_id=it, step=position,
                                step_name="EXECUTE", agent="stub", model=None, session=None)
        ledger.set_step_process(step, 4242, 1.0)
        if cost is not None:
            ledger.set_step_cost(step, cost)
        ledger.close_step(step, "exited" if cost is None else "completed", 3, "")
    ledger.close_iteration(it, "exited", 3, "")
    ledger.close_run(run, "exited", 3, "Exited at iteration 1.2")
    return run, it


def test_a_run_whose_launched_steps_all_lack_a_cost_reads_unknown_everywhere(
        ledger: Ledger) -> None:
    from fractal.store.attention import attention_rows
    from fractal.store.dashboard import live_rows

    unknown, _ = _unpriced_run(ledger, "main.unknown", None)
    partial, _ = _unpriced_run(ledger, "main.partial", 0.5)
    rows = {(r.node, r.kind): r for r in reader.activity(ledger.db_path, None, None)
            if r.event == "end" and r.kind in ("run", "iteration")}
    assert rows["main.unknown", "run"].cost is None  # not the gate check's 0
    assert rows["main.unknown", "iteration"].cost is None
    assert rows["main.partial", "run"].cost == pytest.approx(0.5)  # the known part
    assert rows["main.partial", "iteration"].cost == pytest.approx(0.5)

    inbox = attention_rows(ledger.db_path).spent
    assert inbox[unknown] is None
    assert inbox[partial] == pytest.approx(0.5)
    dash = live_rows(ledger.db_path, [unknown, partial]).spent
    assert dash == {unknown: None, partial: pytest.approx(0.5)}
