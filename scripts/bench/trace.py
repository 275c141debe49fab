"""Turn a ``FRACTAL_TRACE`` file into overhead intervals.

The supervisor appends ``<point> <monotonic ns> <step_id>`` lines (``fractal/runtime/
launch.py``: ``open`` before the step row is booked, ``spawn`` once the agent process
exists, ``exit`` when the waiter sees it exit, ``closed`` once the row is closed). Steps
are taken in booking order (step ids grow); two consecutive steps of the same iteration
give one step gap, a last step and the next iteration's first give one iteration gap.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.sandbox import BenchError

POINTS = ("open", "spawn", "exit", "closed")


@dataclass
class Intervals:
    """Milliseconds, one entry per sample.

    ``gap``: agent N exit -> agent N+1 spawn (consecutive steps of one iteration).
    ``before``: step opened -> spawned and ``after``: exit -> row closed (every step).
    ``between``: row N closed -> row N+1 opened (same iteration). ``iter_*``: the same
    across an iteration boundary. ``agent``: spawn -> exit (the no-op agent's own life).
    """

    gap: list[float] = field(default_factory=list)
    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)
    between: list[float] = field(default_factory=list)
    agent: list[float] = field(default_factory=list)
    iter_gap: list[float] = field(default_factory=list)
    iter_between: list[float] = field(default_factory=list)


def read_trace(path: Path) -> dict[int, dict[str, int]]:
    """step_id -> {point: ns}. Raises BenchError when the file is missing or malformed."""
    try:
        text = path.read_text(encoding="ascii")
    except OSError as exc:
        raise BenchError(f"no trace at {path} ({exc}); is FRACTAL_TRACE wired in "
                         "fractal/runtime/launch.py?") from None
    steps: dict[int, dict[str, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if len(parts) != 3 or parts[0] not in POINTS:
            raise BenchError(f"{path}:{number}: unexpected trace line {line!r}")
        steps.setdefault(int(parts[2]), {})[parts[0]] = int(parts[1])
    return steps


def intervals(points: Mapping[int, Mapping[str, int]],
              iteration_of: Mapping[int, int | None]) -> Intervals:
    """Intervals (ms) from traced ``points`` and each step's iteration id.

    Raises BenchError when a step lacks one of the four points (it did not launch).
    """
    out = Intervals()
    order = sorted(points)
    for step_id in order:
        missing = [p for p in POINTS if p not in points[step_id]]
        if missing:
            raise BenchError(f"step {step_id} has no {', '.join(missing)} point; did it launch?")
        p = points[step_id]
        out.before.append(_ms(p["spawn"] - p["open"]))
        out.after.append(_ms(p["closed"] - p["exit"]))
        out.agent.append(_ms(p["exit"] - p["spawn"]))
    for prev, nxt in itertools.pairwise(order):
        a, b = points[prev], points[nxt]
        same = iteration_of.get(prev) == iteration_of.get(nxt)
        (out.gap if same else out.iter_gap).append(_ms(b["spawn"] - a["exit"]))
        (out.between if same else out.iter_between).append(_ms(b["open"] - a["closed"]))
    return out


def _ms(ns: int) -> float:
    return ns / 1e6
