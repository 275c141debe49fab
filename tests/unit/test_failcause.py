"""The cause shown beside a failed run's reason (fractal/domain/run/failcause.py)."""

from __future__ import annotations

import pytest

from fractal.domain.run.failcause import CAUSE_MAX, failure_cause

MAX_ITERS = "Reached max iterations (2); final iteration failed"
BOOM = "agent error (exit 3): boom: cannot find module foo"


@pytest.mark.parametrize(("run", "name", "step", "shown"), [
    (MAX_ITERS, "EXECUTE", BOOM, f"step EXECUTE failed: {BOOM}"),
    (MAX_ITERS, "EXECUTE", "", ""),                               # no failed step
    (f"3 consecutive iterations failed (last: failed on EXECUTE: {BOOM})", "EXECUTE", BOOM,
     ""),                                                         # said already
    (MAX_ITERS, "EXECUTE", "agent error\n  (exit 3)", "step EXECUTE failed: agent error "
     "(exit 3)"),                                                 # one line
    (MAX_ITERS, "", BOOM, f"a step failed: {BOOM}"),
])
def test_failure_cause(run: str, name: str, step: str, shown: str) -> None:
    assert failure_cause(run, name, step) == shown


def test_a_long_reason_is_clipped() -> None:
    shown = failure_cause(MAX_ITERS, "PLAN", "x" * 500)
    assert shown == "step PLAN failed: " + "x" * (CAUSE_MAX - 3) + "..."
