"""Step-file discovery over a list of file names (docs/loop.md, "Step files").

The contract is strict: at least one ``*.md`` file; every one named ``<digits>-<NAME>.md``;
all digit prefixes the same width. A violation fails the iteration loudly, recorded as
``no step files`` or ``invalid step files``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fractal.domain.errors import StepFileError
from fractal.domain.states import Status

if TYPE_CHECKING:
    from fractal.domain.run.outcome import StepOutcome

__all__ = ["StepFile", "banner_label", "banner_verdict", "discover_steps", "step_label"]

_STEP_NAME = re.compile(r"([0-9]+)-(.+)\.md")


@dataclass(frozen=True)
class StepFile:
    """One discovered step.

    ``filename`` is the bare file name (``02-EXECUTE.md``), ``prefix`` its digits (``02``),
    ``name`` the stem past the first dash (``EXECUTE``), ``position`` its 1-based place in
    sorted order and ``total`` the number of steps in this iteration.
    """

    filename: str
    prefix: str
    name: str
    position: int
    total: int


def discover_steps(filenames: Iterable[str]) -> list[StepFile]:
    """Turn the names found in ``steps/`` into ordered steps.

    ``filenames`` are bare names (no directories). Names not ending ``.md`` and hidden names
    (leading ``.``) are ignored; the rest are sorted lexicographically (by code point).

    Raises ``StepFileError("no step files", why)`` when no ``.md`` name remains, and
    ``StepFileError("invalid step files", detail)`` naming each offending file and why when a
    name lacks the ``<digits>-<NAME>.md`` shape or the prefixes differ in digit width.
    """
    names = sorted(n for n in set(filenames) if n.endswith(".md") and not n.startswith("."))
    if not names:
        raise StepFileError("no step files",
                            "the steps directory holds no *.md file; add one such as 01-WORK.md")
    problems: list[str] = []
    parsed: list[tuple[str, str, str]] = []
    for filename in names:
        match = _STEP_NAME.fullmatch(filename)
        if match is None:
            problems.append(f"{filename}: must be named <digits>-<NAME>.md, e.g. 01-PLAN.md")
        else:
            parsed.append((filename, match.group(1), match.group(2)))
    widths = sorted({len(prefix) for _, prefix, _ in parsed})
    if len(widths) > 1:
        common = max(widths, key=lambda w: (sum(len(p) == w for _, p, _ in parsed), -w))
        for filename, prefix, _ in parsed:
            if len(prefix) != common:
                problems.append(f"{filename}: prefix {prefix!r} has {len(prefix)} digit(s) but "
                                f"the other steps use {common}; rename it to the same width")
    if problems:
        raise StepFileError("invalid step files", "; ".join(problems))
    total = len(parsed)
    return [StepFile(filename=filename, prefix=prefix, name=name, position=index, total=total)
            for index, (filename, prefix, name) in enumerate(parsed, start=1)]


def step_label(step: StepFile) -> str:
    """The ``STEP_LABEL`` prompt variable: ``step 3 of 5 (EXECUTE)``."""
    return f"step {step.position} of {step.total} ({step.name})"


def banner_label(step: StepFile) -> str:
    """The pane banner label: ``Step 3/5 (EXECUTE)``."""
    return f"Step {step.position}/{step.total} ({step.name})"


def banner_verdict(outcome: StepOutcome, limit: float | None) -> str:
    """How the pane's closing banner of a step reads: ``done``, ``done (<reason>)``,
    ``timed out (exit 124, limit 60s)`` (``limit`` in seconds), ``paused``, or
    ``<status> (exit N): <reason>``."""
    if outcome.status is Status.COMPLETED:
        return "done" if not outcome.reason else f"done ({outcome.reason})"
    if outcome.reason.startswith("timed out"):
        return f"{outcome.reason} (exit {outcome.exit_code}, limit {round(limit or 0)}s)"
    if outcome.status is Status.PAUSED:
        return "paused"
    return f"{outcome.status.value} (exit {outcome.exit_code}): {outcome.reason}"
