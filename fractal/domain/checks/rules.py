"""Checks run by the loop itself: exit checks and gate steps (docs/checks.md).

Pure values and decisions: what one finished check is (``CheckResult``), what the run
remembers about its checks (``CheckTrack``), which result the prompts of a step see,
the ``CHECK_*`` variables, and the gate frontmatter (``check:``, ``on_fail:``,
``pass_score:``). A check may report a score (``domain.checks.scores``): with a threshold it
passes only at exit 0 with a score at or above it, and the scored exit checks of a run
feed its stagnation track.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from fractal.domain.checks.progress import Streak, advance_streak, is_stalled
from fractal.domain.checks.scores import (
    DEFAULT_MIN_GAIN,
    DEFAULT_STAGNATION,
    Stagnation,
    advance_stagnation,
    parse_pass_score,
    score_passes,
    stagnation_reason,
)
from fractal.domain.checks.signature import CheckSummary
from fractal.domain.errors import InvalidValue

__all__ = [
    "CHECK_OUTPUT_CHARS",
    "CHECK_OUTPUT_LINES",
    "CHECK_VARIABLES",
    "DEFAULT_FIX_ROUNDS",
    "MAX_FIX_ROUNDS",
    "CheckKind",
    "CheckResult",
    "CheckTrack",
    "FixPlan",
    "OnFail",
    "ScoreRules",
    "check_variables",
    "failure_ids",
    "gate_command",
    "gate_fix_plan",
    "gate_on_fail",
    "gate_pass_score",
    "output_tail",
    "visible_check",
]

CHECK_OUTPUT_LINES = 200
"""Lines of a check's output that ``CHECK_OUTPUT`` keeps (the last ones)."""
CHECK_OUTPUT_CHARS = 32_000
"""...and at most this many characters of them (the end), so the environment stays small."""
CHECK_VARIABLES = ("CHECK_STATUS", "CHECK_COMMAND", "CHECK_OUTPUT", "CHECK_OUTPUT_FILE",
                   "CHECK_SIGNATURE", "CHECK_FAILURES", "CHECK_SCORE", "CHECK_EXIT_CODE",
                   "CHECK_FAILING_IDS")
DEFAULT_FIX_ROUNDS = 3
"""Fix rounds a gate with ``on_fail: fix`` gets when it sets no ``max_fix_rounds``."""
MAX_FIX_ROUNDS = 10
"""The most fix rounds one gate may ask for in one iteration."""


class CheckKind(StrEnum):
    """Where a check ran: the node's exit check, or a gate step."""

    EXIT = "exit"
    GATE = "gate"


class OnFail(StrEnum):
    """What a red gate does to its iteration (frontmatter ``on_fail:``)."""

    CONTINUE = "continue"
    STOP_ITERATION = "stop-iteration"
    FIX = "fix"  # run the gate's fixer, then check again (``FixPlan``)


@dataclass(frozen=True)
class FixPlan:
    """The check-and-fix cycle of a gate: ``fixer`` is the prompt file (relative to the
    node directory, never under ``steps/``), ``rounds`` the fixer launches at most, and
    ``final`` what a gate still red after the last round does to its iteration."""

    fixer: str
    rounds: int = DEFAULT_FIX_ROUNDS
    final: OnFail = OnFail.STOP_ITERATION


@dataclass(frozen=True)
class CheckResult:
    """One finished check: ``command`` exited ``exit_code`` after ``seconds``; ``tail`` is the
    end of its output (``output_tail``), ``output_file`` the full log; ``iteration`` the
    iteration (1-based, in its run) it belongs to; ``timed_out`` when its limit ended it.
    ``score`` is the score it reported (None: none), ``needed`` the threshold it was held
    to (None: the exit code alone decides), ``head`` the commit the worktree stood at when
    it ran (None: unknown), which tells a current score from a stale one."""

    kind: CheckKind
    command: str
    exit_code: int
    seconds: float
    tail: str
    output_file: str
    summary: CheckSummary
    iteration: int
    timed_out: bool = False
    score: float | None = None
    needed: float | None = None
    head: str | None = None

    @property
    def passed(self) -> bool:
        """Exit 0, and with a threshold a reported score at or above it."""
        return score_passes(self.score, self.exit_code, self.needed)


@dataclass(frozen=True)
class ScoreRules:
    """How a run judges scores: ``pass_score`` (None: off), the ``min_gain`` a score must
    rise by between exit checks, and the ``stagnation`` stalled checks in a row that end
    the run (None: never)."""

    pass_score: float | None = None
    min_gain: float = DEFAULT_MIN_GAIN
    stagnation: int | None = DEFAULT_STAGNATION


def failure_ids(result: CheckResult) -> frozenset[str]:
    """The failing test ids a red check named: those its output listed, else (a result
    rebuilt from its row) its signature's ids when the tool's counts were read."""
    if result.passed:
        return frozenset()
    if result.summary.failing:
        return frozenset(result.summary.failing)
    if result.summary.failures is None:
        return frozenset()
    return frozenset(part.strip() for part in result.summary.signature.split(", ")
                     if part.strip())


@dataclass(frozen=True)
class CheckTrack:
    """What a run remembers about its checks: the newest result (``last``), the streak of
    red exit checks, the exit-check command that passed (``passed``) and the signature
    that ended the run for lack of progress (``stalled``); ``scores`` is the stagnation
    track of the scored exit checks and ``stagnant`` its ``stagnation: ...`` reason once
    it ends the run."""

    last: CheckResult | None = None
    streak: Streak | None = None
    passed: str | None = None
    stalled: str | None = None
    scores: Stagnation | None = None
    stagnant: str | None = None

    def after_gate(self, result: CheckResult) -> CheckTrack:
        """A gate's result becomes the newest; the exit-check streak is untouched."""
        return replace(self, last=result)

    def after_exit_check(self, result: CheckResult, no_progress: int | None,
                         rules: ScoreRules | None = None) -> CheckTrack:
        """Fold in an exit check: green sets ``passed``; red advances the streak and sets
        ``stalled`` once it reaches ``no_progress`` (None: never; a check that printed
        nothing ends the streak and never stalls: see ``progress``). A red
        check with a score advances the stagnation track under ``rules`` and sets
        ``stagnant`` once ``rules.stagnation`` stalled checks in a row are reached."""
        if result.passed:
            return replace(self, last=result, streak=None, passed=result.command)
        streak = advance_streak(self.streak, result.summary.signature, result.summary.failures)
        stalled = result.summary.signature if is_stalled(streak, no_progress) else None
        scores, stagnant = self.scores, None
        if result.score is not None:
            rules = rules or ScoreRules()
            scores = advance_stagnation(scores, result.score, failure_ids(result),
                                        rules.min_gain)
            stagnant = stagnation_reason(scores, rules.stagnation)
        return replace(self, last=result, streak=streak, stalled=stalled, scores=scores,
                       stagnant=stagnant)


def visible_check(track: CheckTrack, iteration: int) -> CheckResult | None:
    """The result the steps of ``iteration`` see: the newest check if it belongs to this
    iteration (an earlier gate) or the previous one (its exit check), else None."""
    last = track.last
    if last is None or last.iteration < iteration - 1:
        return None
    return last


def output_tail(text: str, lines: int = CHECK_OUTPUT_LINES,
                chars: int = CHECK_OUTPUT_CHARS) -> str:
    """The last ``lines`` lines of ``text`` (trailing blank lines dropped), cut to the last
    ``chars`` characters at a line boundary when longer."""
    kept = text.rstrip().splitlines()[-lines:]
    tail = "\n".join(kept)
    if len(tail) <= chars:
        return tail
    cut = tail[-chars:]
    newline = cut.find("\n")
    return cut[newline + 1:] if 0 <= newline < len(cut) - 1 else cut


def check_variables(result: CheckResult | None) -> dict[str, str]:
    """The ``CHECK_*`` prompt and environment variables for ``result``.

    CHECK_STATUS ``pass``/``fail`` (``none`` and every other variable empty when there is
    no result), CHECK_COMMAND, CHECK_OUTPUT (the tail), CHECK_OUTPUT_FILE (the full log),
    CHECK_SIGNATURE (empty on a pass), CHECK_FAILURES (the count, empty when unknown),
    CHECK_SCORE (the reported score, empty when none), CHECK_EXIT_CODE, CHECK_FAILING_IDS
    (the failing test ids, one a line, when the output named them).
    """
    if result is None:
        return {name: "none" if name == "CHECK_STATUS" else "" for name in CHECK_VARIABLES}
    failures = result.summary.failures
    return {
        "CHECK_STATUS": "pass" if result.passed else "fail",
        "CHECK_COMMAND": result.command,
        "CHECK_OUTPUT": result.tail,
        "CHECK_OUTPUT_FILE": result.output_file,
        "CHECK_SIGNATURE": result.summary.signature,
        "CHECK_FAILURES": "" if failures is None else str(failures),
        "CHECK_SCORE": "" if result.score is None else f"{round(result.score, 4):g}",
        "CHECK_EXIT_CODE": str(result.exit_code),
        "CHECK_FAILING_IDS": "\n".join(sorted(failure_ids(result))),
    }


def gate_command(fields: Mapping[str, str]) -> str | None:
    """The command of a gate step (frontmatter ``check:``), or None for an agent step."""
    command = fields.get("check")
    return command.strip() if command and command.strip() else None


def gate_on_fail(fields: Mapping[str, str]) -> OnFail:
    """The gate's ``on_fail:`` (default ``continue``). Raises InvalidValue naming the
    accepted values for anything else."""
    value = fields.get("on_fail", OnFail.CONTINUE.value).strip()
    try:
        return OnFail(value)
    except ValueError:
        raise InvalidValue(f"on_fail: {value!r} is not one of continue, stop-iteration, fix; "
                           "using continue") from None


def gate_fix_plan(fields: Mapping[str, str]) -> FixPlan:
    """The fix cycle of a gate with ``on_fail: fix``: ``fix:`` (required; a relative path
    inside the node directory, outside ``steps/``), ``max_fix_rounds:`` (1 to
    MAX_FIX_ROUNDS, default DEFAULT_FIX_ROUNDS) and ``on_fail_final:`` (``continue`` or
    ``stop-iteration``, the default). Raises InvalidValue naming the broken key."""
    fixer = fields.get("fix", "").strip()
    parts = fixer.replace("\\", "/").split("/")
    if not fixer or fixer.startswith("/") or ".." in parts or parts[0] == "steps":
        raise InvalidValue(f"fix: {fixer!r} must name a prompt file inside the node "
                           "directory and outside steps/, such as fixers/LINT.md")
    rounds_text = fields.get("max_fix_rounds", str(DEFAULT_FIX_ROUNDS)).strip()
    if not rounds_text.isdigit() or not 1 <= int(rounds_text) <= MAX_FIX_ROUNDS:
        raise InvalidValue(f"max_fix_rounds: {rounds_text!r} must be a whole number from 1 "
                           f"to {MAX_FIX_ROUNDS}")
    final_text = fields.get("on_fail_final", OnFail.STOP_ITERATION.value).strip()
    if final_text not in (OnFail.CONTINUE.value, OnFail.STOP_ITERATION.value):
        raise InvalidValue(f"on_fail_final: {final_text!r} is not one of continue, "
                           "stop-iteration")
    return FixPlan(fixer, int(rounds_text), OnFail(final_text))


def gate_pass_score(fields: Mapping[str, str], default: float | None) -> float | None:
    """The threshold a gate is held to: its ``pass_score:`` frontmatter (a number in
    (0, 1]), else ``default`` (the node's ``pass_score``). Raises InvalidValue for a
    malformed value or for phases, which gates do not take (docs/checks.md)."""
    value = fields.get("pass_score")
    if value is None or not value.strip():
        return default
    try:
        parsed = parse_pass_score(value)
    except ValueError as exc:
        raise InvalidValue(f"pass_score: {exc}") from None
    assert parsed is not None
    if len(parsed.phases) != 1 or parsed.phases[0][0]:
        raise InvalidValue("pass_score: phases are not supported; give one score such as 0.8")
    return parsed.phases[0][1]
