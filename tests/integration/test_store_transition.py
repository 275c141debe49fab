"""``Ledger.move`` on a real SQLite database: the compare-and-set, the fenced closes, the
event, signal and exit notice, and that a move is written whole or not at all."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.domain.states import NODE_STATUSES, Closes, Move, Status, rule_of
from fractal.errors import NodeNotFound, StoreError
from fractal.store import transition
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.store.transition import EventNote, SignalNote
from tests import ledgersql

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

NODE = "main.a"
TABLES = ("nodes", "runs", "iterations", "steps", "events", "signals", "messages")

# The legal moves written out independently of the module under test: move -> sources.
LEGAL: dict[Move, set[str]] = {
    Move.START: {"idle"}, Move.RESUME: {"paused"}, Move.PARK: {"active", "paused"},
    Move.END: {"active"}, Move.ABORT: {"active"}, Move.HEAL: {"active"},
    Move.INTERRUPT: {"active", "paused"},
    Move.KILL: {"active", "paused", "idle"},
    Move.REARM: {"completed", "stopped", "exited", "killed"}, Move.DISARM: {"idle"},
    Move.RETIRE: {"completed", "stopped", "exited", "killed", "idle"},
    Move.UNRETIRE: {"retired"},
    Move.VANISH: {"completed", "stopped", "exited", "killed", "idle", "retired"},
    Move.RECOVER: {"missing"},
}


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    yield Ledger(tmp_path / "tree" / "fractal.db")
    close_engines()


def _snapshot(ledger: Ledger) -> dict[str, list[tuple[object, ...]]]:
    with ledgersql.connect(ledger.db_path) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}


def _sql(ledger: Ledger, query: str, *args: object) -> list[tuple[object, ...]]:
    with ledgersql.connect(ledger.db_path) as conn:
        return conn.execute(query, args).fetchall()


def _node(ledger: Ledger, status: str = "idle", node: str = NODE) -> None:
    ledger.register_node(node, parent="main", title=None, worktree=None, status=status)


def _chain(ledger: Ledger, *, session: str | None = None) -> tuple[int, int, int]:
    run = ledger.open_run(NODE, agent="claude", max_cost=None, parent_run_id=None)
    it = ledger.open_iteration(NODE, run, 1, agent="claude", model=None)
    step = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=1, step_name="PLAN",
                            agent="claude", model=None, session=session)
    return run, it, step


def _open_rows(ledger: Ledger, node: str = NODE) -> int:
    return sum(int(_sql(ledger, f"SELECT COUNT(*) FROM {t} WHERE node = ? AND ended_at IS NULL",
                        node)[0][0]) for t in ("runs", "iterations", "steps"))


# ---- each move's writes -----------------------------------------------------------------


def test_start_records_the_supervisor_with_the_status(ledger: Ledger) -> None:
    _node(ledger)
    moved = ledger.move(NODE, Move.START, supervisor=(4242, 1700000000.5))
    assert (moved.ok, moved.before, moved.after) == (True, Status.IDLE, Status.ACTIVE)
    row = ledger.node(NODE)
    assert row is not None
    assert (row.status, row.supervisor_pid, row.supervisor_started) == (
        Status.ACTIVE, 4242, 1700000000.5)
    assert row.status is Status.ACTIVE  # rows carry the enum


def test_abort_closes_every_open_row_and_posts_the_notice(ledger: Ledger) -> None:
    _node(ledger, "active")
    _chain(ledger, session="s-1")
    moved = ledger.move(NODE, Move.ABORT, reason="invalid agent: nope")
    assert moved.ok and moved.closed == 3 and moved.notice is not None
    assert _sql(ledger, "SELECT status, exit_code, metadata FROM steps") == [
        ("exited", 1, "invalid agent: nope; unpriced")]
    assert _sql(ledger, "SELECT status, exit_code, metadata FROM runs") == [
        ("exited", 1, "invalid agent: nope")]
    assert _sql(ledger, "SELECT status FROM iterations") == [("exited",)]
    assert _sql(ledger, "SELECT subject, priority, message_uuid FROM messages") == [
        ("run exited: invalid agent: nope", 7, moved.notice)]
    assert _sql(ledger, "SELECT status FROM nodes") == [("exited",)]


def test_abort_without_a_run_posts_no_notice(ledger: Ledger) -> None:
    _node(ledger, "active")
    moved = ledger.move(NODE, Move.ABORT, reason="no parked run to resume")
    assert moved.ok and moved.closed == 0 and moved.notice is None
    assert _sql(ledger, "SELECT COUNT(*) FROM messages") == [(0,)]


def test_heal_parks_the_run_and_clears_the_supervisor(ledger: Ledger) -> None:
    """A heal is an interruption: the open step closes paused, run and iteration stay open."""
    _node(ledger)
    ledger.move(NODE, Move.START, supervisor=(99, 5.0))
    _chain(ledger)
    moved = ledger.move(NODE, Move.HEAL, reason="interrupted: supervisor lost", exit_code=None)
    assert moved.ok and moved.closed == 1
    assert _sql(ledger, "SELECT status, supervisor_pid, supervisor_started FROM nodes") == [
        ("paused", None, None)]
    assert _sql(ledger, "SELECT status, metadata FROM steps") == [
        ("paused", "interrupted: supervisor lost")]
    assert _sql(ledger, "SELECT ended_at FROM iterations UNION ALL "
                        "SELECT ended_at FROM runs") == [(None,), (None,)]
    assert _sql(ledger, "SELECT COUNT(*) FROM messages") == [(0,)]


def test_heal_to_exited_closes_every_row(ledger: Ledger) -> None:
    _node(ledger)
    ledger.move(NODE, Move.START, supervisor=(99, 5.0))
    _chain(ledger)
    moved = ledger.move(NODE, Move.HEAL, to=Status.EXITED, reason="Loop exited abnormally")
    assert moved.ok and moved.closed == 3
    assert _sql(ledger, "SELECT status, supervisor_pid FROM nodes") == [("exited", None)]
    assert _sql(ledger, "SELECT subject FROM messages") == [
        ("run exited: Loop exited abnormally",)]


def test_interrupt_parks_every_open_step(ledger: Ledger) -> None:
    _node(ledger, "active")
    _chain(ledger)
    moved = ledger.move(NODE, Move.INTERRUPT, reason="interrupted: SIGHUP", exit_code=129)
    assert moved.ok and moved.closed == 1
    assert _sql(ledger, "SELECT status FROM nodes") == [("paused",)]
    assert _sql(ledger, "SELECT status, exit_code, metadata FROM steps") == [
        ("paused", 129, "interrupted: SIGHUP")]
    assert _open_rows(ledger) == 2


@pytest.mark.parametrize(("to", "notice"), [
    (Status.COMPLETED, False), (Status.STOPPED, False), (Status.EXITED, True)])
def test_end_closes_the_run_only(ledger: Ledger, to: Status, notice: bool) -> None:
    _node(ledger, "active")
    run, it, step = _chain(ledger)
    ledger.close_step(step, "completed", 0, "")
    ledger.close_iteration(it, "completed", 0, "")
    moved = ledger.move(NODE, Move.END, to=to, run_id=run, exit_code=0, reason="why",
                        figures="spent $1.0000 of $2.00 max")
    assert moved.ok and moved.after is to and moved.closed == 1
    assert _sql(ledger, "SELECT status, exit_code, metadata FROM runs") == [(to.value, 0, "why")]
    assert _sql(ledger, "SELECT data FROM messages") == (
        [("why\nspent $1.0000 of $2.00 max",)] if notice else [])
    assert _sql(ledger, "SELECT status FROM nodes") == [(to.value,)]


def test_end_needs_a_run(ledger: Ledger) -> None:
    _node(ledger, "active")
    with pytest.raises(ValueError, match="run_id"):
        ledger.move(NODE, Move.END, to=Status.COMPLETED)


def test_park_closes_the_step_paused_and_writes_the_event(ledger: Ledger) -> None:
    _node(ledger, "active")
    run, it, step = _chain(ledger)
    moved = ledger.move(NODE, Move.PARK, step_id=step, exit_code=130, reason="", event=EventNote(
        "pause", actor="loop", metadata="parked at PLAN", run_id=run, iter_id=it))
    assert moved.ok and moved.closed == 1
    assert _sql(ledger, "SELECT status, exit_code FROM steps") == [("paused", 130)]
    assert _sql(ledger, "SELECT status FROM runs WHERE ended_at IS NULL") == [("active",)]
    assert _sql(ledger, "SELECT event, actor, status, metadata, run_id, iter_id FROM events") \
        == [("pause", "loop", "completed", "parked at PLAN", run, it)]
    # The supervisor's own park after a step parked the node: paused -> paused.
    again = ledger.move(NODE, Move.PARK, event=EventNote("pause", actor="loop"))
    assert again.ok and again.before is Status.PAUSED
    assert ledger.park_step(step, NODE, 0, "x") is False  # the step is closed already


def test_kill_writes_event_signal_and_status_together(ledger: Ledger) -> None:
    _node(ledger, "active")
    run, _, _ = _chain(ledger)
    moved = ledger.move(NODE, Move.KILL, event=EventNote("kill", actor="operator",
                                                         metadata="killed by operator"),
                        signal=SignalNote(run, "kill", "killed by operator"))
    assert moved.ok and moved.closed == 0  # the reap closes the rows once the groups are gone
    assert _sql(ledger, "SELECT signal, metadata FROM signals") == [("kill", "killed by operator")]
    assert _sql(ledger, "SELECT event, status FROM events") == [("kill", "completed")]
    assert _sql(ledger, "SELECT status FROM nodes") == [("killed",)]
    assert _open_rows(ledger) == 3


def test_rearm_then_disarm_restores_the_settled_status(ledger: Ledger) -> None:
    _node(ledger, "stopped")
    assert ledger.move(NODE, Move.REARM).after is Status.IDLE
    assert ledger.move(NODE, Move.DISARM, to=Status.STOPPED).after is Status.STOPPED
    assert ledger.move(NODE, Move.DISARM, to=Status.STOPPED).ok is False  # not idle now


# ---- refusals write nothing -------------------------------------------------------------


@pytest.mark.parametrize(("status", "move"), [
    ("killed", Move.PARK), ("killed", Move.END), ("exited", Move.HEAL), ("paused", Move.ABORT),
    ("active", Move.START), ("completed", Move.KILL), ("retired", Move.REARM),
])
def test_a_refused_move_writes_nothing(ledger: Ledger, status: str, move: Move) -> None:
    _node(ledger, status)
    run, _, step = _chain(ledger)
    before = _snapshot(ledger)
    moved = ledger.move(NODE, move, run_id=run, step_id=step, reason="r", supervisor=(1, 1.0),
                        event=EventNote("probe"), signal=SignalNote(run, "kill"))
    assert not moved.ok and moved.after is None
    assert f"node {NODE}: the node is {status}" in moved.why
    assert "moves allowed from" in moved.why
    assert _snapshot(ledger) == before


def test_no_setter_writes_a_status(ledger: Ledger) -> None:
    _node(ledger, "active")
    with pytest.raises(StoreError, match=r"only through Ledger\.move"):
        ledger._set_node(NODE, status="exited")
    assert _sql(ledger, "SELECT status FROM nodes") == [("active",)]


def test_refused_moves_raise_on_request(ledger: Ledger) -> None:
    with pytest.raises(NodeNotFound, match=r"main\.ghost"):
        ledger.move("main.ghost", Move.HEAL).raise_if_refused()
    _node(ledger, "exited")
    with pytest.raises(Exception, match="heal needs active"):
        ledger.move(NODE, Move.HEAL).raise_if_refused()


def test_a_failure_mid_transaction_leaves_nothing_written(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(ledger, "active")
    _chain(ledger, session="s")
    before = _snapshot(ledger)

    def broken(*_args: object, **_kwargs: object) -> str:
        raise RuntimeError("disk gone")

    # The rows are closed, the notice insert fails: the whole move rolls back.
    monkeypatch.setattr(transition, "insert_exit_notice", broken)
    with pytest.raises(RuntimeError, match="disk gone"):
        ledger.move(NODE, Move.ABORT, reason="boom", event=EventNote("probe"))
    assert _snapshot(ledger) == before
    assert _open_rows(ledger) == 3
    monkeypatch.undo()
    assert ledger.move(NODE, Move.HEAL, reason="healed").ok  # the next healer finishes it


def _serial_outcomes(moves: dict[str, tuple[Move, str]], start: str
                     ) -> list[tuple[dict[str, bool], str]]:
    """(who landed, final status) for every order the moves could commit in one at a time,
    by the independent ``LEGAL`` table: a move lands when the status it meets allows it."""
    outcomes = []
    for order in itertools.permutations(moves):
        status, landed = start, {}
        for name in order:
            move, target = moves[name]
            landed[name] = status in LEGAL[move]
            if landed[name]:
                status = target
        outcomes.append((landed, status))
    return outcomes


def test_racing_writers_each_win_at_most_once(tmp_path: Path) -> None:
    """A heal, the loop's own end and a kill race from separate connections: the outcome is
    one the moves give committed one after another (the first lands; a later one lands only
    when the table allows it from the status the earlier left: a kill after the heal's
    park), and the rows carry the last winner's status."""
    db = tmp_path / "fractal.db"
    first = Ledger(db)
    _node(first, "active")
    run, _, _ = _chain(first)
    barrier = threading.Barrier(3)
    results: dict[str, bool] = {}

    def go(name: str, move: Move, **kw: object) -> None:
        mine = Ledger(db)
        barrier.wait()
        results[name] = mine.move(NODE, move, **kw).ok  # type: ignore[arg-type]

    threads = [threading.Thread(target=go, args=("heal", Move.HEAL), kwargs={"reason": "h"}),
               threading.Thread(target=go, args=("end", Move.END),
                                kwargs={"to": Status.COMPLETED, "run_id": run, "reason": "e"}),
               threading.Thread(target=go, args=("kill", Move.KILL))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    close_engines()
    (status,) = _sql(first, "SELECT status FROM nodes")[0]
    moves = {"heal": (Move.HEAL, "paused"), "end": (Move.END, "completed"),
             "kill": (Move.KILL, "killed")}
    assert (results, status) in _serial_outcomes(moves, "active")
    assert sum(results.values()) >= 1
    if status == "paused":  # the heal alone landed: a heal parks, the run stays open
        assert _sql(first, "SELECT status, ended_at FROM runs") == [("active", None)]
    elif status == "completed":
        assert _sql(first, "SELECT status FROM runs") == [(status,)]


# ---- random interleavings ---------------------------------------------------------------


class _World:
    """A node driven by random actors: the verbs, its loop (which opens rows while it is
    active) and healers. Every move's outcome is checked against the table."""

    def __init__(self, ledger: Ledger, rng: random.Random, node: str) -> None:
        self.ledger, self.rng, self.node = ledger, rng, node
        self.history: list[tuple[str, str]] = []

    def open_rows(self) -> None:
        """What a live loop does between moves: open a run, an iteration, a step."""
        lg, node = self.ledger, self.node
        run = lg.open_run_of(node)
        if run is None:
            lg.open_run(node, agent=None, max_cost=None, parent_run_id=None)
            return
        it = lg.open_iteration_of(run.run_id)
        if it is None:
            lg.open_iteration(node, run.run_id, 1, agent=None, model=None)
        else:
            lg.open_step(node=node, run_id=run.run_id, iter_id=it.iter_id, step=1,
                         step_name="S", agent=None, model=None,
                         session=self.rng.choice([None, "sess"]))

    def step(self) -> None:
        lg, node, rng = self.ledger, self.node, self.rng
        row = lg.node(node)
        assert row is not None
        if row.status is Status.ACTIVE and rng.random() < 0.5:
            self.open_rows()
            return
        if row.status is Status.KILLED and rng.random() < 0.3:  # the kill's reap
            lg.close_open(node, "killed", "killed by operator")
        move = rng.choice(list(Move))
        run = lg.open_run_of(node)
        steps = lg.open_steps(node)
        to = rng.choice([None, None, *sorted(NODE_STATUSES)])
        kwargs: dict[str, object] = {
            "to": to, "reason": rng.choice(["", "why"]),
            "run_id": run.run_id if run else rng.randint(1, 50),
            "step_id": rng.choice(steps).step_id if steps and rng.random() < 0.7 else None,
            "supervisor": (rng.randint(2, 9999), 1.0),
            "event": EventNote("probe", metadata=move.value) if rng.random() < 0.5 else None,
        }
        had_run = run is not None
        notices = len(lg.messages(node))
        before = _snapshot(lg)
        moved = lg.move(node, move, **kwargs)  # type: ignore[arg-type]
        after = lg.node(node)
        assert after is not None
        if not moved.ok:
            assert row.status not in LEGAL[move] or (to is not None
                                                     and to not in rule_of(move).targets)
            assert _snapshot(lg) == before, f"refused {move} wrote something"
            return
        assert row.status.value in LEGAL[move], f"illegal {move} from {row.status}"
        assert after.status is moved.after and after.status in rule_of(move).targets
        self.history.append((row.status.value, after.status.value))
        posted = len(lg.messages(node)) - notices
        assert posted == (1 if after.status is Status.EXITED and had_run else 0)
        closes = rule_of(move).closes
        if closes is Closes.OPEN_ROWS:  # never a half-written end
            assert _open_rows(lg, node) == 0
        if closes is Closes.RUN and run is not None:
            closed = lg.run(run.run_id)
            assert closed is not None and closed.ended_at is not None
        if move is Move.HEAL:
            assert after.supervisor_pid is None


@pytest.mark.parametrize("seed", range(6))
def test_random_interleavings_never_make_an_illegal_move(ledger: Ledger, seed: int) -> None:
    rng = random.Random(seed)
    worlds = [_World(ledger, rng, f"main.n{i}") for i in range(2)]
    for world in worlds:
        _node(ledger, "idle", world.node)
    for _ in range(120):
        rng.choice(worlds).step()
    for world in worlds:
        assert world.history, "the walk made no move at all"
        for i in range(1, len(world.history)):
            assert world.history[i][0] == world.history[i - 1][1]  # an unbroken chain


def test_concurrent_random_moves_form_one_legal_chain(tmp_path: Path) -> None:
    """Four writers on their own connections fire random moves at one node; every landed
    move writes a probe event in its transaction, and in commit order those events form an
    unbroken chain of legal moves."""
    db = tmp_path / "fractal.db"
    _node(Ledger(db))

    def writer(seed: int) -> None:
        rng, mine = random.Random(seed), Ledger(db)
        for _ in range(60):
            move = rng.choice(list(Move))
            row = mine.node(NODE)
            assert row is not None
            run = mine.open_run_of(NODE)
            if row.status is Status.ACTIVE and run is None:
                mine.open_run(NODE, agent=None, max_cost=None, parent_run_id=None)
                continue
            to = rng.choice(rule_of(move).targets)
            mine.move(NODE, move, to=to, run_id=run.run_id if run else 1, reason="r",
                      supervisor=(seed, 1.0),
                      event=EventNote("probe", metadata=f"{move.value} {to.value}"))

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    close_engines()
    with ledgersql.connect(db) as conn:
        probes = [r[0].split() for r in conn.execute(
            "SELECT metadata FROM events WHERE event = 'probe' ORDER BY event_id")]
        final = conn.execute("SELECT status FROM nodes").fetchone()[0]
    assert len(probes) > 4
    status = "idle"
    for name, landed in probes:
        assert status in LEGAL[Move(name)], f"{name} landed from {status}"
        status = landed
    assert final == status


def test_signal_run_writes_the_signal_and_its_event_together(ledger: Ledger) -> None:
    _node(ledger, "active")
    run, _, _ = _chain(ledger)
    ledger.signal_run(NODE, run, "pause", actor="operator", reason="lunch")
    assert _sql(ledger, "SELECT signal, metadata, run_id FROM signals") == [("pause", "lunch", run)]
    assert _sql(ledger, "SELECT event, actor, status, metadata FROM events") == [
        ("pause", "operator", "completed", "lunch")]


@pytest.mark.parametrize(("move", "reason"), [
    (Move.HEAL, "Loop exited abnormally"), (Move.ABORT, "Loop exited abnormally"),
])
def test_a_close_of_a_waiting_gate_keeps_it_unapproved(ledger: Ledger, move: Move,
                                                       reason: str) -> None:
    """A heal (or any move that closes the open rows) of a node waiting at a gate keeps
    ``awaiting approval; `` in front of the step's reason, so the gate still reads as
    never approved (``node merge`` refuses it without --force); a step that is not a
    waiting gate gets the reason alone."""
    _node(ledger, "active")
    run, iter_id, _plan = _chain(ledger)
    gate = ledger.open_step(node=NODE, run_id=run, iter_id=iter_id, step=2, step_name="GATE",
                            agent="claude", model=None, session=None, gated=True)
    ledger.mark_awaiting_approval(gate)
    assert ledger.move(NODE, move, reason=reason).ok
    assert _sql(ledger, "SELECT step_name, metadata FROM steps ORDER BY step_id") == [
        ("PLAN", reason), ("GATE", f"awaiting approval; {reason}")]
    assert [s.step_name for s in ledger.pending_approvals(NODE)] == ["GATE"]
