"""The ledger write API: registry, fenced closes, stranded rows, steps, events, signals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fractal.domain.run.outcome import ABNORMAL_EXIT as STRANDED_REASON
from fractal.domain.states import Move
from fractal.errors import NodeNotFound, StoreError
from fractal.store.ledger import Ledger
from fractal.store.timefmt import to_epoch
from tests import ledgersql

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

NODE = "main.parser"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "tree" / "fractal.db")


def _run(ledger: Ledger, node: str = NODE) -> int:
    return ledger.open_run(node, agent="claude", max_cost=None, parent_run_id=None)


def _chain(ledger: Ledger) -> tuple[int, int, int]:
    """An open run with an open iteration and an open step; returns their ids."""
    run = _run(ledger)
    it = ledger.open_iteration(NODE, run, 1, agent="claude", model="opus")
    step = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=1, step_name="PLAN",
                            agent="claude", model="opus", session=None)
    return run, it, step


# ---- registry ---------------------------------------------------------------------------


def test_register_then_reregister_updates_the_row(ledger: Ledger) -> None:
    ledger.register_node(NODE, parent="main", title="Parser", worktree="/w/p",
                         caps={"max_cost": 10, "max_depth": 2})
    first = ledger.node(NODE)
    assert first is not None
    assert (first.status, first.max_cost, first.max_depth, first.max_children) == (
        "idle", 10.0, 2, None)
    ledger.register_node(NODE, parent="main", title="Parser v2", worktree="/w/p2",
                         status="active", caps={"max_children": 3})
    second = ledger.node(NODE)
    assert second is not None
    assert second.node_id == first.node_id
    assert (second.title, second.worktree, second.status) == ("Parser v2", "/w/p2", "active")
    assert (second.max_cost, second.max_depth, second.max_children) == (10.0, 2, 3)
    assert second.created_at == first.created_at
    assert [n.node for n in ledger.nodes()] == [NODE]


def test_unknown_cap_key_is_refused(ledger: Ledger) -> None:
    with pytest.raises(StoreError, match="max_iters"):
        ledger.register_node(NODE, parent=None, title=None, worktree=None,
                             caps={"max_iters": 3})
    assert ledger.node(NODE) is None


def test_node_setters(ledger: Ledger) -> None:
    ledger.register_node(NODE, parent="main", title=None, worktree=None)
    ledger.move(NODE, Move.START, supervisor=(1, 1.0)).raise_if_refused()
    ledger.set_tmux(NODE, "fx-main-parser", "/tmp/sock")
    ledger.set_supervisor(NODE, 4242, 1700000000.25)
    ledger.set_caps(NODE, {"max_cost": 2.5, "max_descendants": None})
    row = ledger.node(NODE)
    assert row is not None
    assert (row.status, row.tmux_session, row.tmux_socket) == ("active", "fx-main-parser",
                                                               "/tmp/sock")
    assert (row.supervisor_pid, row.supervisor_started, row.max_cost) == (4242, 1700000000.25,
                                                                          2.5)
    ledger.set_supervisor(NODE, None, None)
    cleared = ledger.node(NODE)
    assert cleared is not None and cleared.supervisor_pid is None


@pytest.mark.parametrize("call", [
    lambda lg: lg.move("main.ghost", Move.START, supervisor=(1, 1.0)).raise_if_refused(),
    lambda lg: lg.set_tmux("main.ghost", "s", None),
    lambda lg: lg.set_supervisor("main.ghost", 1, 1.0),
    lambda lg: lg.set_caps("main.ghost", {"max_cost": 1}),
])
def test_setters_on_an_unregistered_node_raise(ledger: Ledger,
                                               call: Callable[[Ledger], None]) -> None:
    with pytest.raises(NodeNotFound, match=r"main\.ghost"):
        call(ledger)


@pytest.mark.parametrize(("current", "move", "won", "after"), [
    ("idle", Move.START, True, "active"),
    ("paused", Move.START, False, "paused"),
    ("exited", Move.REARM, True, "idle"),
])
def test_compare_and_set_status(ledger: Ledger, current: str, move: Move, won: bool,
                                after: str) -> None:
    ledger.register_node(NODE, parent=None, title=None, worktree=None, status=current)
    assert ledger.move(NODE, move, supervisor=(1, 1.0)).ok is won
    row = ledger.node(NODE)
    assert row is not None and row.status == after


def test_compare_and_set_on_missing_node_is_false(ledger: Ledger) -> None:
    assert ledger.move("main.ghost", Move.START, supervisor=(1, 1.0)).ok is False


def test_delete_node_keeps_history(ledger: Ledger) -> None:
    ledger.register_node(NODE, parent=None, title=None, worktree=None)
    run = _run(ledger)
    ledger.delete_node(NODE)
    ledger.delete_node(NODE)  # idempotent
    assert ledger.node(NODE) is None
    assert ledger.run(run) is not None


# ---- fenced closes ----------------------------------------------------------------------


@pytest.mark.parametrize("level", ["run", "iteration", "step"])
def test_second_close_loses_and_keeps_the_first_writers_row(ledger: Ledger, level: str) -> None:
    run, it, step = _chain(ledger)
    closers: dict[str, tuple[Callable[[int, str, int | None, str], bool], int, str, str]] = {
        "run": (ledger.close_run, run, "runs", "run_id"),
        "iteration": (ledger.close_iteration, it, "iterations", "iter_id"),
        "step": (ledger.close_step, step, "steps", "step_id"),
    }
    close, ident, table, key = closers[level]
    assert close(ident, "completed", 0, "first") is True
    assert close(ident, "exited", 1, "second") is False
    with ledgersql.connect(ledger.db_path) as conn:
        row = conn.execute(f"SELECT status, exit_code, metadata, ended_at FROM {table} "
                           f"WHERE {key} = ?", (ident,)).fetchone()
    assert row[:3] == ("completed", 0, "first")
    assert row[3] is not None


def test_open_run_closes_stranded_rows_in_the_same_transaction(ledger: Ledger) -> None:
    run, it, step = _chain(ledger)
    ledger.set_step_session(step, "sess-1")  # a session and no cost: unpriced
    priced = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=2, step_name="EXECUTE",
                              agent="claude", model="opus", session="sess-1")
    ledger.set_step_cost(priced, 0.5)
    other = _run(ledger, "main.other")

    new_run = ledger.open_run(NODE, agent="codex", max_cost=3.0, parent_run_id=other)

    old = ledger.run(run)
    assert old is not None
    assert (old.status, old.exit_code, old.meta) == ("exited", 1, STRANDED_REASON)
    assert ledger.open_iteration_of(run) is None
    steps = {s.step_id: s for s in ledger.steps_of_iteration(it)}
    assert steps[step].status == "exited"
    assert steps[step].meta == STRANDED_REASON + "; unpriced"
    assert steps[priced].meta == STRANDED_REASON
    assert steps[priced].cost == 0.5
    assert ledger.open_steps(NODE) == []
    # The new run and the other node's run are untouched.
    fresh = ledger.open_run_of(NODE)
    assert fresh is not None and fresh.run_id == new_run
    assert (fresh.agent, fresh.max_cost, fresh.parent_run_id) == ("codex", 3.0, other)
    assert old.ended_at == fresh.started_at
    assert ledger.active_run_id("main.other") == other
    assert ledger.active_run_id(NODE) == new_run
    last = ledger.last_run(NODE)
    assert last is not None and last.run_id == new_run


def test_close_open_closes_every_open_row_once(ledger: Ledger) -> None:
    run, it, step = _chain(ledger)
    done = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=2, step_name="EXECUTE",
                            agent=None, model=None, session=None)
    ledger.close_step(done, "completed", 0, "")
    assert ledger.close_open(NODE, "killed", "killed by operator") == 3
    assert ledger.close_open(NODE, "killed", "again") == 0
    rows = {s.step_id: s for s in ledger.steps_of_iteration(it)}
    assert (rows[step].status, rows[step].meta) == ("killed", "killed by operator")
    assert rows[done].status == "completed"
    closed = ledger.run(run)
    assert closed is not None and (closed.status, closed.exit_code) == ("killed", 1)
    assert ledger.open_run_of(NODE) is None
    assert ledger.active_run_id(NODE) is None


# ---- iterations and steps ---------------------------------------------------------------


def test_iteration_session_and_model(ledger: Ledger) -> None:
    run = _run(ledger)
    it = ledger.open_iteration(NODE, run, 1, agent="claude", model=None)
    ledger.set_iteration_session(it, "sess-9")
    ledger.set_iteration_model(it, "sonnet")
    row = ledger.open_iteration_of(run)
    assert row is not None
    assert (row.iter, row.session, row.model, row.status) == (1, "sess-9", "sonnet", "active")


def test_step_cost_is_null_until_known_and_close_keeps_flushed_figures(ledger: Ledger) -> None:
    run, it, step = _chain(ledger)
    assert ledger.open_steps(NODE)[0].cost is None
    ledger.set_step_cost(step, 0.75)
    ledger.close_step(step, "exited", 1, "timed out")  # cost=None: keep 0.75
    other = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=2, step_name="EXECUTE",
                             agent=None, model=None, session=None)
    ledger.close_step(other, "completed", 0, "", cost=0.0)
    free = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=3, step_name="REVIEW",
                            agent=None, model=None, session=None)
    ledger.close_step(free, "failed", 1, "agent error (exit 2): boom")
    costs = [s.cost for s in ledger.steps_of_iteration(it)]
    assert costs == [0.75, 0.0, None]


def test_step_detail_setters_and_gate(ledger: Ledger) -> None:
    run = _run(ledger)
    gated = ledger.open_step(node=NODE, run_id=run, iter_id=None, step=0, step_name="SYNC",
                             agent="claude", model=None, session=None, gated=True)
    plain = ledger.open_step(node=NODE, run_id=run, iter_id=None, step=1, step_name="PLAN",
                             agent="claude", model=None, session=None)
    ledger.set_step_model(gated, "opus")
    ledger.set_step_process(gated, 31337, 1700000000.5)
    row = ledger.step(gated)
    assert row is not None
    assert (row.approved, row.model, row.pgid, row.pgid_started) == ("", "opus", 31337,
                                                                     1700000000.5)
    plain_row = ledger.step(plain)
    assert plain_row is not None and plain_row.approved is None
    assert ledger.approve_step(plain) is False
    assert ledger.approve_step(gated) is True
    assert ledger.approve_step(gated) is False
    approved = ledger.step(gated)
    assert approved is not None and approved.approved
    to_epoch(approved.approved)  # an instant, not a marker


def test_book_closed_step_opens_and_closes_at_one_instant(ledger: Ledger) -> None:
    run, it, _ = _chain(ledger)
    booked = ledger.book_closed_step(node=NODE, run_id=run, iter_id=it, step=4,
                                     step_name="COMMIT", status="stopped", exit_code=1,
                                     reason="failed on PLAN", cost=None)
    row = ledger.step(booked)
    assert row is not None
    assert row.started_at == row.ended_at
    assert (row.status, row.exit_code, row.meta, row.cost) == ("stopped", 1, "failed on PLAN",
                                                               None)
    assert ledger.close_step(booked, "completed", 0, "late") is False


def test_long_reasons_are_stored_as_given(ledger: Ledger) -> None:
    run = _run(ledger)
    reason = "agent error (exit 1): " + "x" * 400
    ledger.close_run(run, "exited", 1, reason)
    row = ledger.run(run)
    assert row is not None and row.meta == reason


# ---- events, signals, maintenance -------------------------------------------------------


def test_events_settle_once(ledger: Ledger) -> None:
    run = _run(ledger)
    event = ledger.add_event(NODE, "commit", actor="operator", status="active",
                             metadata="abc123", run_id=run)
    assert ledger.end_event(event, "completed", 0) is True
    assert ledger.end_event(event, "failed", 1) is False
    with ledgersql.connect(ledger.db_path) as conn:
        row = conn.execute("SELECT event, actor, status, exit_code, metadata, run_id "
                           "FROM events WHERE event_id = ?", (event,)).fetchone()
    assert row == ("commit", "operator", "completed", 0, "abc123", run)


def test_signals_queue_and_consume(ledger: Ledger) -> None:
    run = _run(ledger)
    ledger.add_signal(NODE, run, "pause")
    ledger.add_signal(NODE, run, "finish", "by parent")
    ledger.add_signal(NODE, run, "pause")
    assert [(s.signal, s.meta) for s in ledger.signals(run)] == [
        ("pause", ""), ("finish", "by parent"), ("pause", "")]
    assert ledger.delete_signals(run, "pause") == 2
    assert ledger.delete_signals(run, "pause") == 0
    assert [s.signal for s in ledger.signals(run)] == ["finish"]


@pytest.mark.sqlite_only("the WAL file is SQLite's")
def test_checkpoint_truncates_the_wal_and_integrity_is_ok(ledger: Ledger) -> None:
    run = _run(ledger)
    for _ in range(20):
        ledger.add_signal(NODE, run, "pause")
    wal = ledger.db_path.with_name(ledger.db_path.name + "-wal")
    assert wal.stat().st_size > 0
    ledger.checkpoint()
    assert wal.stat().st_size == 0
    assert ledger.integrity_ok() is True
