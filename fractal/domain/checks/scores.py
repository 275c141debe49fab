"""Scored checks: a check that reports how close the work is, thresholds, stagnation.

A gate step or exit check may end its output with a score in [0, 1]: a last line
``score: 0.72`` or a JSON line ``{"score": 0.72}``. With ``pass_score`` set, a score
below it is a failed check even when the command exited 0 (a non-zero exit fails the
check whatever its score).

Phases: ``pass_score: A=0.8,B=0.9`` is a sequence of named thresholds. The first phase
is active at the start; once a check passes the active phase's threshold, the next
phase becomes active (the check learns the active phase from ``CHECK_PHASE``), and only
passing the last phase passes the check. A single number is one unnamed phase.

Stagnation: a check *stalls* when its score rose by less than ``min_gain`` over the
previous scored check and it names no failing test id the previous one did not (new
failures mean the work moved, just not up). ``stagnation`` stalled checks in a row end
the run ``exited`` with ``stagnation: score <previous> -> <current>``. A check that
gained ``min_gain`` or more, or named new failures, restarts the count.

Pure: text and numbers in, values out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MIN_GAIN",
    "DEFAULT_STAGNATION",
    "PassScore",
    "Stagnation",
    "advance_stagnation",
    "distance_note",
    "parse_pass_score",
    "parse_score",
    "score_label",
    "score_passes",
    "score_signature",
    "stagnation_reason",
]

DEFAULT_MIN_GAIN = 0.02
"""A score must rise by at least this much between two checks to count as progress."""
DEFAULT_STAGNATION = 2
"""Stalled scored checks in a row that end the run."""


def _unit(value: object) -> float | None:
    """``value`` as a finite float in [0, 1], else None (``bool`` is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None


def parse_score(output: str) -> float | None:
    """The score a check reported: its LAST non-blank output line, when that line is
    ``score: <number>`` (any case, optional spaces) or a JSON object with a numeric
    ``score``; None when the last line is neither or the number is outside [0, 1]."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    if last.startswith("{"):
        try:
            data = json.loads(last)
        except ValueError:
            return None
        return _unit(data.get("score")) if isinstance(data, dict) else None
    key, sep, rest = last.partition(":")
    if not sep or key.strip().lower() != "score":
        return None
    try:
        return _unit(float(rest.strip()))
    except ValueError:
        return None


@dataclass(frozen=True)
class PassScore:
    """Thresholds in phase order: ``((name, threshold), ...)``; a plain number is one
    phase named ``""``."""

    phases: tuple[tuple[str, float], ...]

    def threshold(self, phase: str) -> float:
        """The threshold of ``phase`` (the first phase's for an unknown name)."""
        return next((t for name, t in self.phases if name == phase), self.phases[0][1])

    def first(self) -> str:
        """The phase active at the start of a run."""
        return self.phases[0][0]

    def after(self, phase: str) -> str | None:
        """The phase after ``phase``; None when ``phase`` is the last."""
        names = [name for name, _ in self.phases]
        index = names.index(phase) if phase in names else 0
        return names[index + 1] if index + 1 < len(names) else None


def parse_pass_score(value: object) -> PassScore | None:
    """``pass_score`` from config or frontmatter: None (off), a number in (0, 1], or
    ``"A=0.8,B=0.9"`` (names unique, thresholds in (0, 1] and not decreasing).
    Raises ValueError naming the rule."""
    if value is None:
        return None
    if not isinstance(value, str):
        number = _unit(value)
        if number is None or number == 0:
            raise ValueError("must be a score above 0 and at most 1, or phases like "
                             "\"A=0.8,B=0.9\"")
        return PassScore((("", number),))
    text = value.strip()
    if "=" not in text:
        try:
            return parse_pass_score(float(text))
        except ValueError:
            raise ValueError("must be a score above 0 and at most 1, or phases like "
                             "\"A=0.8,B=0.9\"") from None
    phases: list[tuple[str, float]] = []
    for part in text.split(","):
        name, sep, figure = part.partition("=")
        name = name.strip()
        threshold: float | None
        try:
            threshold = _unit(float(figure.strip())) if sep else None
        except ValueError:
            threshold = None
        if not name or not name.isidentifier() or threshold is None or threshold == 0:
            raise ValueError(f"phase {part.strip()!r} must read NAME=SCORE with a score "
                             "above 0 and at most 1")
        if any(name == seen for seen, _ in phases):
            raise ValueError(f"phase {name} is named twice")
        if phases and threshold < phases[-1][1]:
            raise ValueError(f"phase {name}'s threshold {threshold:g} is below the "
                             f"previous phase's {phases[-1][1]:g}")
        phases.append((name, threshold))
    return PassScore(tuple(phases))


def score_passes(score: float | None, exit_code: int, needed: float | None) -> bool:
    """Whether a check passed: a non-zero exit never passes; without a threshold the exit
    code decides; with one, the score must be reported and at least ``needed``."""
    if exit_code != 0:
        return False
    if needed is None:
        return True
    return score is not None and score >= needed


@dataclass(frozen=True)
class Stagnation:
    """The stall count after the latest scored check, its score and failing ids."""

    count: int
    score: float
    failures: frozenset[str]
    previous: float | None = None


def advance_stagnation(track: Stagnation | None, score: float, failures: Iterable[str],
                       min_gain: float = DEFAULT_MIN_GAIN) -> Stagnation:
    """The track after one more scored check (module docstring: Stagnation). The first
    scored check of a run starts the track at 0."""
    ids = frozenset(failures)
    if track is None:
        return Stagnation(0, score, ids)
    stalled = score - track.score < min_gain - 1e-12 and not (ids - track.failures)
    return Stagnation(track.count + 1 if stalled else 0, score, ids, previous=track.score)


def stagnation_reason(track: Stagnation | None, limit: int | None) -> str | None:
    """``stagnation: score 0.71 -> 0.72`` once ``limit`` stalled checks in a row are
    reached (``limit`` None: never)."""
    if limit is None or track is None or track.count < limit or track.previous is None:
        return None
    return f"stagnation: score {score_label(track.previous)} -> {score_label(track.score)}"


def score_label(score: float) -> str:
    """A score as people write it: ``0.72``, ``0.715``, ``1`` (at most 4 decimals)."""
    return f"{round(score, 4):g}"


def distance_note(score: float | None, needed: float | None, stale: bool) -> str | None:
    """``score 0.72 of 0.8 needed`` for a run that ended short of a threshold; None when
    there is no score or threshold, or the score is ``stale`` (the check ran before the
    last commit, so it does not describe the work as it is)."""
    if score is None or needed is None or stale or score >= needed:
        return None
    return f"score {score_label(score)} of {score_label(needed)} needed"


def score_signature(score: float | None, needed: float) -> str:
    """The signature of a check that exited 0 but missed its threshold:
    ``score 0.72 below pass_score 0.8``, or ``no score reported (pass_score 0.8)``."""
    if score is None:
        return f"no score reported (pass_score {score_label(needed)})"
    return f"score {score_label(score)} below pass_score {score_label(needed)}"
