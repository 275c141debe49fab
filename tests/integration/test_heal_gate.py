"""A gate in its approval wait keeps that wait through a heal or an interruption: the
open-steps park writes ``awaiting approval; <reason>`` on it, and the resume plan waits
at the gate again instead of rerunning its agent. A gate whose agent was still running
(not yet waiting) is re-entered as any interrupted step. Real SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.domain.states import Move, Status
from fractal.lifecycle.heal import SUPERVISOR_LOST
from fractal.runtime.adopt import resume_position
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger

NODE = "main.g"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger(tmp_path / "tree" / "fractal.db")
    led.register_node(NODE, parent="main", title=None, worktree=None, status="active")
    yield led
    close_engines()


def _gate(ledger: Ledger, *, waiting: bool) -> tuple[int, int]:
    """(iter_id, step_id): step 1 completed, step 2 a gate (in its wait when ``waiting``)."""
    run = ledger.open_run(NODE, agent="claude", max_cost=None, parent_run_id=None)
    it = ledger.open_iteration(NODE, run, 1, agent="claude", model=None)
    done = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=1, step_name="A",
                            agent="claude", model=None, session="s-a")
    ledger.close_step(done, "completed", 0, "")
    gate = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=2, step_name="GATE",
                            agent="claude", model=None, session="s-g", gated=True)
    if waiting:
        ledger.mark_awaiting_approval(gate)
    ledger.open_step(node=NODE, run_id=run, iter_id=it, step=2, step_name="SYNC",
                     agent="claude", model=None, session=None)  # the wait's own SYNC
    return it, gate


def _meta(ledger: Ledger, step_id: int) -> tuple[object, ...]:
    with sqlite3.connect(ledger.db_path) as conn:
        return conn.execute("SELECT status, metadata FROM steps WHERE step_id = ?",
                            (step_id,)).fetchone()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("move", "reason"), [(Move.HEAL, SUPERVISOR_LOST),
                                               (Move.INTERRUPT, "interrupted: SIGHUP")])
def test_a_waiting_gate_keeps_its_wait_through_the_park(ledger: Ledger, move: Move,
                                                        reason: str) -> None:
    it, gate = _gate(ledger, waiting=True)
    moved = ledger.move(NODE, move, to=Status.PAUSED, reason=reason, exit_code=None)
    assert moved.ok and moved.closed == 2
    assert _meta(ledger, gate) == ("paused", f"awaiting approval; {reason}")
    position, pending = resume_position(ledger.steps_of_iteration(it))
    assert position == 2 and pending is not None and pending.step_id == gate  # wait again


def test_a_gate_whose_agent_still_ran_is_reentered(ledger: Ledger) -> None:
    it, gate = _gate(ledger, waiting=False)
    assert ledger.move(NODE, Move.HEAL, to=Status.PAUSED, reason=SUPERVISOR_LOST,
                       exit_code=None).ok
    assert _meta(ledger, gate) == ("paused", SUPERVISOR_LOST)
    assert resume_position(ledger.steps_of_iteration(it)) == (2, None)  # its agent runs


def test_an_approved_gate_is_not_marked_waiting(ledger: Ledger) -> None:
    _it, gate = _gate(ledger, waiting=False)
    assert ledger.approve_step(gate)
    ledger.mark_awaiting_approval(gate)  # too late: it was released
    assert ledger.move(NODE, Move.HEAL, to=Status.PAUSED, reason=SUPERVISOR_LOST,
                       exit_code=None).ok
    assert _meta(ledger, gate) == ("paused", SUPERVISOR_LOST)
