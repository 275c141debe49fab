"""Scored checks: reading a score, thresholds and phases, stagnation, the distance note."""

from __future__ import annotations

import pytest

from fractal.domain.checks.scores import (
    PassScore,
    Stagnation,
    advance_stagnation,
    distance_note,
    parse_pass_score,
    parse_score,
    score_passes,
    stagnation_reason,
)


@pytest.mark.parametrize(("output", "score"), [
    ("ran 12 tests\nscore: 0.72\n", 0.72),
    ("score:0.5", 0.5),
    ("SCORE : 1", 1.0),
    ('noise\n{"score": 0.25, "detail": "x"}\n\n', 0.25),
    ('{"score": 0}', 0.0),
    ("score: 0.72\nmore output after it", None),  # only the last line counts
    ("score: 1.5", None),
    ("score: -0.1", None),
    ("score: nan", None),
    ('{"score": true}', None),
    ('{"score": "0.5"}', None),
    ("{not json", None),
    ("scores: 0.5", None),
    ("", None),
])
def test_parse_score(output: str, score: float | None) -> None:
    assert parse_score(output) == score


@pytest.mark.parametrize(("value", "phases"), [
    (0.8, (("", 0.8),)),
    (1, (("", 1.0),)),
    ("0.8", (("", 0.8),)),
    ("A=0.8,B=0.9", (("A", 0.8), ("B", 0.9))),
    (" A = 0.8 , B=0.8 ", (("A", 0.8), ("B", 0.8))),
])
def test_parse_pass_score(value: object, phases: tuple[tuple[str, float], ...]) -> None:
    parsed = parse_pass_score(value)
    assert parsed is not None and parsed.phases == phases
    assert parse_pass_score(None) is None


@pytest.mark.parametrize(("value", "fragment"), [
    (0, "above 0"), (1.5, "above 0"), (True, "above 0"), ("x", "above 0"),
    ("A=0.8,A=0.9", "named twice"), ("A=0.9,B=0.8", "below the previous"),
    ("A=,B=0.9", "NAME=SCORE"), ("=0.8", "NAME=SCORE"), ("A=2", "NAME=SCORE"),
    ("A-1=0.5", "NAME=SCORE"),
])
def test_parse_pass_score_refuses(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_pass_score(value)


def test_phases_advance_in_order() -> None:
    phased = PassScore((("A", 0.8), ("B", 0.9)))
    assert phased.first() == "A" and phased.after("A") == "B" and phased.after("B") is None
    assert phased.threshold("B") == 0.9 and phased.threshold("nope") == 0.8


@pytest.mark.parametrize(("score", "code", "needed", "passed"), [
    (None, 0, None, True), (None, 1, None, False), (0.9, 1, 0.8, False),
    (0.79, 0, 0.8, False), (0.8, 0, 0.8, True), (None, 0, 0.8, False), (1.0, 0, 0.8, True),
])
def test_score_passes(score: float | None, code: int, needed: float | None,
                      passed: bool) -> None:
    assert score_passes(score, code, needed) is passed


def run_track(scores: list[float], failures: list[set[str]] | None = None,
              limit: int = 2) -> tuple[int | None, str | None]:
    """(1-based index of the check that stops on stagnation, its reason)."""
    track: Stagnation | None = None
    for index, score in enumerate(scores, start=1):
        track = advance_stagnation(track, score, (failures or [set()] * len(scores))[index - 1])
        reason = stagnation_reason(track, limit)
        if reason is not None:
            return index, reason
    return None, None


@pytest.mark.parametrize(("scores", "failures", "limit", "stop", "reason"), [
    ([0.5, 0.7, 0.71, 0.715], None, 2, 4, "stagnation: score 0.71 -> 0.715"),
    ([0.5, 0.7, 0.71, 0.75, 0.76, 0.77], None, 2, 6, "stagnation: score 0.76 -> 0.77"),
    ([0.5, 0.52, 0.54, 0.56], None, 2, None, None),  # exactly min_gain is progress
    ([0.5, 0.5, 0.5], None, 3, None, None),
    ([0.5, 0.5, 0.5, 0.5], None, 3, 4, "stagnation: score 0.5 -> 0.5"),
    ([0.6, 0.5, 0.4], None, 2, 3, "stagnation: score 0.5 -> 0.4"),  # falling stalls too
    ([0.5, 0.5, 0.5], [{"t1"}, {"t1", "t2"}, {"t1", "t2", "t3"}], 2, None, None),
    ([0.5, 0.5, 0.5], [{"t1", "t2"}, {"t1"}, {"t1"}], 2, 3, "stagnation: score 0.5 -> 0.5"),
])
def test_stagnation(scores: list[float], failures: list[set[str]] | None, limit: int,
                    stop: int | None, reason: str | None) -> None:
    assert run_track(scores, failures, limit) == (stop, reason)


def test_stagnation_off_and_first_check() -> None:
    track = advance_stagnation(None, 0.3, [])
    assert track.count == 0 and stagnation_reason(track, 1) is None
    assert stagnation_reason(advance_stagnation(track, 0.3, []), None) is None


@pytest.mark.parametrize(("score", "needed", "stale", "note"), [
    (0.72, 0.8, False, "score 0.72 of 0.8 needed"),
    (0.72, 0.8, True, None), (0.9, 0.8, False, None), (None, 0.8, False, None),
    (0.5, None, False, None),
])
def test_distance_note(score: float | None, needed: float | None, stale: bool,
                       note: str | None) -> None:
    assert distance_note(score, needed, stale) == note
