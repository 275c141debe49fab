"""The budget arithmetic, table-driven (seed: "Cost ceilings", "The per-step budget",
"Reserve mode and how a budget ends a run"; ref §4.7)."""

from __future__ import annotations

import pytest

from fractal.domain.budget import ceilings as budget
from fractal.domain.budget.ceilings import Caps, Landing
from fractal.domain.signals import fanout_reason

CAP100 = Caps(100.0, 10.0, 1.0, 10.0)


@pytest.mark.parametrize(("amount", "compact", "fixed"), [
    (100.0, "$100", "$100.0000"),
    (87.65432, "$87.6543", "$87.6543"),
    (0.5, "$0.5", "$0.5000"),
    (0.0, "$0", "$0.0000"),
    (1e-6, "$0", "$0.0000"),
    (12.34005, "$12.34", "$12.3400"),
])
def test_money_formats(amount: float, compact: str, fixed: str) -> None:
    assert (budget.usd(amount), budget.usd4(amount)) == (compact, fixed)


@pytest.mark.parametrize(("args", "expected"), [
    ((None, None, None, None), Caps(None, None, None, 0.0)),
    ((100.0, None, None, None), Caps(100.0, None, None, 10.0)),
    ((0.33333, None, None, None), Caps(0.33333, None, None, 0.0333)),
    ((100.0, 10.0, 1.0, 5.0), Caps(100.0, 10.0, 1.0, 5.0)),
    ((100.0, None, None, 0.0), Caps(100.0, None, None, 0.0)),
])
def test_caps_resolve_the_default_reserve(args: tuple[float | None, ...], expected: Caps) -> None:
    assert budget.caps_of(*args) == expected


@pytest.mark.parametrize(("caps", "spent", "expected"), [
    (Caps(None), 5.0, None),
    (Caps(10.0), 0.0, 10.0),
    (Caps(10.0), 2.34567, 7.6543),
    (Caps(10.0), 12.0, 0.0),  # clamped at 0
])
def test_run_remaining(caps: Caps, spent: float, expected: float | None) -> None:
    assert budget.run_remaining(caps, spent) == expected


@pytest.mark.parametrize(("caps", "run_spent", "iter_spent", "expected"), [
    # no cap at all: no budget
    (Caps(None), 3.0, 1.0, None),
    # the run remaining minus the reserve
    (Caps(100.0, reserve=10.0), 0.0, 0.0, 90.0),
    (Caps(100.0, reserve=10.0), 50.0, 0.0, 40.0),
    # inside the reserve window: floors at the full run remaining
    (Caps(100.0, reserve=10.0), 95.0, 0.0, 5.0),
    (Caps(100.0, reserve=10.0), 90.0, 0.0, 10.0),
    # past the ceiling: nothing left, the launch is skipped
    (Caps(100.0, reserve=10.0), 100.0, 0.0, 0.0),
    (Caps(100.0, reserve=10.0), 130.0, 0.0, 0.0),
    # the iteration headroom
    (Caps(100.0, 10.0, reserve=10.0), 20.0, 7.5, 2.5),
    # a spent iteration cap is ignored (the iteration runs in reserve mode)
    (Caps(100.0, 10.0, reserve=10.0), 20.0, 12.0, 70.0),
    # the step cap
    (CAP100, 0.0, 0.0, 1.0),
    (CAP100, 0.0, 9.5, 0.5),
    (CAP100, 99.6, 0.0, 0.4),
    (CAP100, 100.0, 0.0, 0.0),
    # rounding to 4 dp
    (Caps(1.0, reserve=0.1), 0.123456, 0.0, 0.7765),
])
def test_step_budget(caps: Caps, run_spent: float, iter_spent: float,
                     expected: float | None) -> None:
    assert budget.step_budget(caps, run_spent, iter_spent) == expected


@pytest.mark.parametrize(("caps", "run_spent", "iter_spent", "cascaded", "stem"), [
    (Caps(None), 0.0, 0.0, False, None),
    (Caps(None), 0.0, 0.0, True, "an ancestor's cost budget finish"),
    (CAP100, 0.0, 0.0, False, None),
    (CAP100, 5.0, 10.0, False, "the iteration spent $10.0000 of its $10 cap"),
    (CAP100, 89.0, 1.0, False, None),
    (CAP100, 90.0, 1.0, False, "$10.0000 remains of $100, inside the $10 reserve"),
    (CAP100, 120.0, 1.0, False, "$0.0000 remains of $100"),
    (CAP100, 90.0, 10.0, True, "an ancestor's"),  # the cascade is named first
])
def test_reserve_cause(caps: Caps, run_spent: float, iter_spent: float, cascaded: bool,
                       stem: str | None) -> None:
    cause = budget.reserve_cause(caps, run_spent, iter_spent, cascaded)
    assert (cause is None) == (stem is None)
    if stem is not None:
        assert cause is not None and cause.startswith(stem)


@pytest.mark.parametrize(("caps", "spent", "enforcing", "label"), [
    (Caps(None), 3.0, True, "no limit"),
    (Caps(100.0, reserve=10.0), 12.34567, False, "$87.6543 remaining of $100"),
    (CAP100, 12.34567, False, "$87.6543 remaining of $100 (max $10/iter) (warn $1/step)"),
    (CAP100, 12.34567, True, "$87.6543 remaining of $100 (max $10/iter) (max $1/step)"),
    (Caps(5.0, None, 0.25, 0.5), 7.0, False, "$0.0000 remaining of $5 (warn $0.25/step)"),
])
def test_cost_budget_label(caps: Caps, spent: float, enforcing: bool, label: str) -> None:
    assert budget.cost_budget_label(caps, spent, enforcing) == label


@pytest.mark.parametrize(("caps", "spent", "ceiling", "boundary"), [
    (Caps(None), 50.0, None, None),
    (CAP100, 89.9999, None, None),
    (CAP100, 90.0, None,
     "cost budget reserve reached (spent $90.0000 >= $100 max - $10 reserve)"),
    (CAP100, 100.0, "subtree cost budget reached (spent $100.0000 >= $100 max)",
     "subtree cost budget reached (spent $100.0000 >= $100 max)"),
    (Caps(2.5, reserve=0.0), 2.4999, None, None),
    (Caps(2.5, reserve=0.0), 2.49996, "subtree cost budget reached (spent $2.5000 >= $2.5 max)",
     "subtree cost budget reached (spent $2.5000 >= $2.5 max)"),  # compared at 4 dp
    (Caps(2.5, reserve=0.0), 2.500004, "subtree cost budget reached (spent $2.5000 >= $2.5 max)",
     "subtree cost budget reached (spent $2.5000 >= $2.5 max)"),
])
def test_ceiling_and_boundary_reasons(caps: Caps, spent: float, ceiling: str | None,
                                      boundary: str | None) -> None:
    assert budget.ceiling_reason(caps, spent) == ceiling
    assert budget.boundary_reason(caps, spent) == boundary


@pytest.mark.parametrize(("reason", "is_budget"), [
    ("cost budget reserve reached (spent $9.0000 >= $10 max - $1 reserve)", True),
    ("subtree cost budget reached (spent $10.0000 >= $10 max)", True),
    ("subtree cost budget reached (spent $10.0000 >= $10 max) (via finish of main.a)", True),
    ("ancestor cost budget reached (spent $0.5000 by this run; via main.a)", True),
    ("subtree cost budget reached", False),  # free text without the figures
    ("requirements met; subtree cost budget reached (spent $1 >= $1 max)", False),
    ("cost budget exceeded in finish wind-down (spent $11.0000 >= $10 max)", False),
    ("finish requested (via finish of main.a)", False),
    ("", False),
])
def test_finish_reasons_are_classified_by_shape(reason: str, is_budget: bool) -> None:
    assert budget.is_budget_reason(reason) is is_budget


SUBTREE = "subtree cost budget reached (spent $10.0000 >= $10 max)"


@pytest.mark.parametrize(("own", "finishes", "finished", "spent", "expected"), [
    # no budget involvement
    (None, [], False, 1.0, Landing(None)),
    (None, ["done"], True, 1.0, Landing(None)),
    # the run's own bound
    (SUBTREE, [SUBTREE], True, 10.0, Landing(SUBTREE)),
    # a cascaded budget finish, relabelled with this run's figures
    (None, [fanout_reason(SUBTREE, "finish", "main.a")], True, 0.25,
     Landing("ancestor cost budget reached (spent $0.2500 by this run; via main.a)")),
    # a deliberate finish wins; under the cap there is no note...
    (SUBTREE, [SUBTREE, "requirements verified"], True, 9.5, Landing(None)),
    # ...past it the overshoot rides along
    (SUBTREE, ["requirements verified", SUBTREE], True, 11.0,
     Landing(None, "cost budget exceeded in finish wind-down (spent $11.0000 >= $10 max)")),
    # a deliberate finish that did not end the run does not count
    (SUBTREE, ["requirements verified"], False, 11.0, Landing(SUBTREE)),
])
def test_landing(own: str | None, finishes: list[str], finished: bool, spent: float,
                 expected: Landing) -> None:
    caps = Caps(10.0, reserve=1.0)
    assert budget.landing(own_reason=own, finish_reasons=finishes, finished=finished,
                          caps=caps, run_spent=spent) == expected


def test_ancestor_reason_without_a_via_suffix() -> None:
    assert budget.ancestor_reason(1.5, SUBTREE) == \
        "ancestor cost budget reached (spent $1.5000 by this run)"
