"""The pure rules behind ``fractal node done``: where its signal acts among the others, how
``node status`` shows it, and how the run's reason reads."""

from __future__ import annotations

import pytest

from fractal.domain.reasons import REASON_LIMIT, done_reason
from fractal.domain.signals import Signal, decoration, winning


@pytest.mark.parametrize(("pending", "allow_stop", "expected"), [
    ({"done"}, True, Signal.DONE),
    ({"done"}, False, None),  # before an iteration's first step it waits for the boundary
    ({"done", "stop"}, True, Signal.STOP),  # the operator's word names the end
    ({"done", "finish"}, True, Signal.FINISH),
    ({"done", "pause"}, False, Signal.PAUSE),
    ({"done", "kill"}, True, Signal.KILL),
    (set(), True, None),
])
def test_done_acts_where_a_stop_does_and_yields_to_the_operator(
        pending: set[str], allow_stop: bool, expected: Signal | None) -> None:
    assert winning(pending, allow_stop=allow_stop) is expected


@pytest.mark.parametrize(("status", "pending", "shown"), [
    ("active", {"done"}, "active (ending)"),
    ("active", {"done", "stop"}, "active (stopping)"),
    ("completed", {"done"}, "completed"),
])
def test_status_shows_a_pending_done_as_ending(status: str, pending: set[str],
                                               shown: str) -> None:
    assert decoration(status, pending) == shown


@pytest.mark.parametrize(("reason", "expected"), [
    ("", "Done"),
    ("   ", "Done"),
    ("children merged", "Done: children merged"),
    ("two\nlines", "Done: two lines"),
])
def test_done_reason(reason: str, expected: str) -> None:
    assert done_reason(reason) == expected


def test_a_long_done_reason_is_clipped() -> None:
    text = done_reason("x" * 400)
    assert len(text) == REASON_LIMIT and text.startswith("Done: x")
