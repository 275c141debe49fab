"""The one table of TERM-to-KILL graces, and the override of the step grace."""

from __future__ import annotations

import pytest

from fractal.procs.processes import GRACES, Reap, grace


def test_every_reason_has_a_grace() -> None:
    assert set(GRACES) == set(Reap)
    assert (GRACES[Reap.STEP], GRACES[Reap.KILL], GRACES[Reap.HEAL], GRACES[Reap.EXIT]) == (
        10.0, 5.0, 2.0, 2.0)


@pytest.mark.parametrize(("env", "step"), [
    (None, 10.0), ("1", 1.0), ("0", 0.1), ("600", 60.0), ("soon", 10.0), ("nan", 10.0),
    ("inf", 10.0)])
def test_the_override_moves_the_step_grace_only(monkeypatch: pytest.MonkeyPatch,
                                                env: str | None, step: float) -> None:
    if env is None:
        monkeypatch.delenv("FRACTAL_KILL_GRACE", raising=False)
    else:
        monkeypatch.setenv("FRACTAL_KILL_GRACE", env)
    assert grace(Reap.STEP) == step
    assert [grace(r) for r in (Reap.KILL, Reap.HEAL, Reap.EXIT)] == [5.0, 2.0, 2.0]
