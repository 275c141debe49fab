"""Rebuild a run's check memory (exit checks and gate steps) when a parked run is resumed.

A resume starts a fresh supervisor, so the newest check result (the diagnostics of the
next prompts) and the no-progress streak are read back from the run's ``checks`` rows.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fractal.domain.checks.rules import CheckKind, CheckResult, CheckTrack, ScoreRules, output_tail
from fractal.domain.checks.signature import CheckSummary
from fractal.runtime.checks import read_log
from fractal.store.checkrows import CheckRow, checks

__all__ = ["restore_track"]


def _result(row: CheckRow, pass_score: float | None) -> CheckResult:
    """The row as a result; a row that exited 0 with a signature failed on its score, so it
    keeps a threshold above the score it reported (its own is not stored)."""
    needed = None
    if row.score is not None and row.exit_code == 0:
        needed = pass_score if not row.signature else max(pass_score or 0.0, row.score + 1e-9)
    return CheckResult(kind=CheckKind(row.kind), command=row.command, exit_code=row.exit_code,
                       seconds=row.duration, tail="", output_file=row.output_path or "",
                       summary=CheckSummary(row.signature, row.failures, row.passed),
                       iteration=row.iter or 0, score=row.score, needed=needed)


def restore_track(db_path: Path, node: str, run_id: int, no_progress: int | None,
                  rules: ScoreRules | None = None) -> CheckTrack:
    """The ``CheckTrack`` of run ``run_id`` as its rows tell it, folded in order (gates
    update the newest result, exit checks the streak and the stagnation track under
    ``rules`` too). The newest result's output tail is read back from its log.
    ``passed``/``stalled``/``stagnant`` are cleared: the resumed run goes on.
    Raises StoreError when the rows cannot be read.
    """
    track = CheckTrack()
    for row in checks(db_path, node, run_id):
        result = _result(row, rules.pass_score if rules else None)
        track = (track.after_gate(result) if result.kind is CheckKind.GATE
                 else track.after_exit_check(result, no_progress, rules))
    last = track.last
    if last is not None and last.output_file:
        last = replace(last, tail=output_tail(read_log(Path(last.output_file))))
    return replace(track, last=last, passed=None, stalled=None, stagnant=None)
