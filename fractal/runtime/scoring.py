"""The score side of the loop's checks: the run's score rules from its live config, the
commit a check saw, and the distance a run that ended short of its threshold reports.

A score describes the worktree as it stood when the check ran; once a later commit moved
the branch, the score is stale and a run's end says nothing about it.
"""

from __future__ import annotations

from pathlib import Path

from fractal.domain.checks.rules import CheckTrack, ScoreRules
from fractal.domain.checks.scores import distance_note
from fractal.errors import FractalError
from fractal.runtime.context import RunState
from fractal.workspace.git import head_sha

__all__ = ["head_of", "score_distance", "score_rules"]


def head_of(worktree: Path) -> str | None:
    """The commit the worktree stands at, None when git cannot tell."""
    try:
        return head_sha(worktree)
    except FractalError:
        return None


def score_rules(state: RunState) -> ScoreRules:
    """The run's score rules, from its live config."""
    live = state.live
    return ScoreRules(live.pass_score, live.min_gain, live.stagnation)


def score_distance(worktree: Path, track: CheckTrack) -> str | None:
    """``score 0.72 of 0.8 needed`` when the newest check of ``track`` is red, scored and
    held to a threshold, and the worktree still stands at the commit it checked (a check
    older than the last commit is stale: None)."""
    last = track.last
    if last is None or last.passed or last.score is None or last.needed is None:
        return None
    stale = last.head is None or last.head != head_of(worktree)
    return distance_note(last.score, last.needed, stale)
