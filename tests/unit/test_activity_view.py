"""The terminal view of ``fractal node activity`` (fractal/domain/views/activity.py): the
repeats an early failure leaves, one table row per situation."""

from __future__ import annotations

import pytest

from fractal.domain.views.activity import collapse_repeats

T = "2026-12-02T06:56:14.470Z"
FAILED_ON = "failed on PLAN"


def _step(event: str, step_id: int, step: str, at: str = T, status: str = "stopped",
          reason: str = FAILED_ON, ref: str = "1.3") -> dict[str, object]:
    end = event == "end"
    return {"timestamp": at, "node": "main.bad", "kind": "step", "event": event, "ref": ref,
            "step": step, "status": status if end else "active", "exit": 0 if end else None,
            "duration": 0.0 if end else None, "reason": reason if end else "",
            "step_id": step_id}


def _booked(step_id: int, step: str, **extra: str) -> list[dict[str, object]]:
    """A step booked without running: its end row above its start row, one instant."""
    return [_step("end", step_id, step, **extra), _step("start", step_id, step, **extra)]


def _shown(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(r["event"], r["ref"], r["step"], r["status"], r["reason"])
            for r in collapse_repeats(rows)]


CASES = [
    ("nothing", [], []),
    ("one-booked-step", _booked(5, "2 EXECUTE"),
     [("end", "1.3", "2 EXECUTE", "stopped", FAILED_ON)]),
    ("three-booked-steps", [*_booked(7, "4 DOCS"), *_booked(6, "3 REVIEW"),
                            *_booked(5, "2 EXECUTE")],
     [("end", "1.3", "2 EXECUTE .. 4 DOCS", "stopped", f"{FAILED_ON} (x3)")]),
    ("a-step-that-ran-keeps-its-start", [
        _step("end", 4, "1 PLAN", status="failed", reason="agent error (exit 2)"),
        _step("start", 4, "1 PLAN", at="2026-12-02T06:56:14.444Z")],
     [("end", "1.3", "1 PLAN", "failed", "agent error (exit 2)"),
      ("start", "1.3", "1 PLAN", "active", "")]),
    ("other-iterations-stay-apart", [*_booked(9, "2 EXECUTE", ref="1.3"),
                                     *_booked(5, "2 EXECUTE", ref="1.2")],
     [("end", "1.3", "2 EXECUTE", "stopped", FAILED_ON),
      ("end", "1.2", "2 EXECUTE", "stopped", FAILED_ON)]),
    ("other-reasons-stay-apart", [*_booked(6, "3 REVIEW", reason="failed on EXECUTE"),
                                  *_booked(5, "2 EXECUTE")],
     [("end", "1.3", "3 REVIEW", "stopped", "failed on EXECUTE"),
      ("end", "1.3", "2 EXECUTE", "stopped", FAILED_ON)]),
]


@pytest.mark.parametrize(("rows", "shown"), [(r, s) for _, r, s in CASES],
                         ids=[c[0] for c in CASES])
def test_collapse_repeats(rows: list[dict[str, object]], shown: list[tuple[object, ...]]
                          ) -> None:
    assert _shown(rows) == shown


def test_the_rows_given_are_left_as_they_were() -> None:
    rows = [*_booked(6, "3 REVIEW"), *_booked(5, "2 EXECUTE")]
    before = [dict(r) for r in rows]
    collapse_repeats(rows)
    assert rows == before
