"""The table of node moves: every (move, from) pair is legal or refused exactly as listed."""

from __future__ import annotations

import pytest

from fractal.domain.errors import FractalError
from fractal.domain.states import (
    ITERATION_STATUSES,
    NODE_STATUSES,
    RULES,
    RUN_STATUSES,
    SETTLED,
    STEP_STATUSES,
    Closes,
    IllegalMove,
    Move,
    Status,
    SupervisorEffect,
    land,
    moves_from,
    refusal,
    rule_of,
)

A, P, IDL, C, S, E, K, R = (Status.ACTIVE, Status.PAUSED, Status.IDLE, Status.COMPLETED,
                          Status.STOPPED, Status.EXITED, Status.KILLED, Status.RETIRED)
M = Status.MISSING

# The expected table, written out independently of the module: move -> (from, default to).
LEGAL: dict[Move, tuple[set[Status], Status]] = {
    Move.START: ({IDL}, A),
    Move.RESUME: ({P}, A),
    Move.PARK: ({A, P}, P),
    Move.END: ({A}, E),
    Move.ABORT: ({A}, E),
    Move.HEAL: ({A}, P),
    Move.INTERRUPT: ({A, P}, P),
    Move.KILL: ({A, P, IDL}, K),
    Move.REARM: ({C, S, E, K}, IDL),
    Move.DISARM: ({IDL}, C),
    Move.RETIRE: ({C, S, E, K, IDL}, R),
    Move.UNRETIRE: ({R}, C),
    Move.VANISH: ({C, S, E, K, IDL, R}, M),
    Move.RECOVER: ({M}, C),
}

PAIRS = [(m, s) for m in Move for s in sorted(NODE_STATUSES)]


def test_every_move_has_one_rule() -> None:
    assert [r.move for r in RULES] == list(Move)
    assert set(LEGAL) == set(Move)


@pytest.mark.parametrize(("move", "current"), PAIRS, ids=lambda v: str(v))
def test_each_pair_is_legal_or_refused_as_the_table_says(move: Move, current: Status) -> None:
    sources, default = LEGAL[move]
    if current in sources:
        assert refusal(move, current) is None
        assert land(move, current) is default
        assert move in moves_from(current)
    else:
        why = refusal(move, current)
        assert why is not None
        assert f"the node is {current.value}" in why  # names the current state
        allowed = ", ".join(m.value for m in moves_from(current)) or "none"
        assert f"moves allowed from {current.value}: {allowed}" in why
        with pytest.raises(IllegalMove) as info:
            land(move, current, node="main.a")
        assert info.value.current is current and info.value.move is move
        assert info.value.allowed == moves_from(current)
        assert str(info.value).startswith("node main.a: the node is")
        assert move not in moves_from(current)


@pytest.mark.parametrize(("move", "target", "legal"), [
    (Move.END, C, True), (Move.END, S, True), (Move.END, E, True), (Move.END, K, False),
    (Move.END, P, False), (Move.ABORT, E, True), (Move.ABORT, C, False),
    (Move.DISARM, K, True), (Move.DISARM, IDL, False), (Move.DISARM, A, False),
    (Move.UNRETIRE, IDL, True), (Move.UNRETIRE, E, True), (Move.UNRETIRE, R, False),
    (Move.START, A, True), (Move.START, P, False), (Move.KILL, K, True),
    (Move.RECOVER, R, True), (Move.RECOVER, IDL, True), (Move.RECOVER, M, False),
    (Move.VANISH, M, True), (Move.VANISH, R, False),
])
def test_targets(move: Move, target: Status, legal: bool) -> None:
    current = sorted(rule_of(move).sources)[0]
    if legal:
        assert land(move, current, target) is target
    else:
        why = refusal(move, current, target)
        assert why is not None and f"cannot land on {target.value}" in why


def test_an_unregistered_node_is_refused_every_move() -> None:
    for move in Move:
        why = refusal(move, None)
        assert why is not None and "not registered" in why
        with pytest.raises(IllegalMove) as info:
            land(move, None)
        assert info.value.allowed == ()
        assert isinstance(info.value, FractalError)


@pytest.mark.parametrize(("status", "moves"), [
    (IDL, [Move.START, Move.KILL, Move.DISARM, Move.RETIRE, Move.VANISH]),
    (A, [Move.PARK, Move.END, Move.ABORT, Move.HEAL, Move.INTERRUPT, Move.KILL]),
    (P, [Move.RESUME, Move.PARK, Move.INTERRUPT, Move.KILL]),
    (E, [Move.REARM, Move.RETIRE, Move.VANISH]),
    (K, [Move.REARM, Move.RETIRE, Move.VANISH]),
    (R, [Move.UNRETIRE, Move.VANISH]),
    (M, [Move.RECOVER]),
    (Status.FAILED, []),
])
def test_moves_from(status: Status, moves: list[Move]) -> None:
    assert list(moves_from(status)) == moves


@pytest.mark.parametrize(("move", "closes", "supervisor"), [
    (Move.START, Closes.NOTHING, SupervisorEffect.RECORD),
    (Move.RESUME, Closes.NOTHING, SupervisorEffect.RECORD),
    (Move.PARK, Closes.STEP, SupervisorEffect.KEEP),
    (Move.END, Closes.RUN, SupervisorEffect.KEEP),
    (Move.ABORT, Closes.OPEN_ROWS, SupervisorEffect.KEEP),
    (Move.HEAL, Closes.OPEN_STEPS, SupervisorEffect.CLEAR),
    (Move.INTERRUPT, Closes.OPEN_STEPS, SupervisorEffect.KEEP),
    (Move.KILL, Closes.NOTHING, SupervisorEffect.KEEP),
    (Move.REARM, Closes.NOTHING, SupervisorEffect.KEEP),
])
def test_what_a_move_does_besides_the_status(move: Move, closes: Closes,
                                            supervisor: SupervisorEffect) -> None:
    rule = rule_of(move)
    assert (rule.closes, rule.supervisor) == (closes, supervisor)


def test_row_vocabularies() -> None:
    assert Status.FAILED not in NODE_STATUSES and Status.FAILED in STEP_STATUSES
    assert Status.IDLE not in RUN_STATUSES | STEP_STATUSES
    assert Status.RETIRED not in STEP_STATUSES
    assert {A} | SETTLED == RUN_STATUSES
    assert ITERATION_STATUSES < STEP_STATUSES
    assert Status.PAUSED in STEP_STATUSES and Status.PAUSED not in RUN_STATUSES


def test_every_target_is_a_node_status_and_no_move_starts_from_failed() -> None:
    for rule in RULES:
        assert set(rule.targets) <= NODE_STATUSES
        assert rule.sources <= NODE_STATUSES
