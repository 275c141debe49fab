"""The weather of ``make night`` (tests/soak/night.py): what happens to the tree over a
compressed night, as a table, and the seeded schedule drawn from it.

Each row of WEATHER is one kind of event: how many times at least it comes (``count``;
every kind at least twice), how long it lasts (``span``, seconds at the reference night
of REFERENCE_MINUTES, scaled with the night's length; ``None`` for an instant event) and
what it acts on (``target``: which mock credential, or nothing). ``forecast`` places the
events at seeded random instants in the busy part of the night (between EARLIEST and
LATEST of it, so the dawn is left calm for the nodes to finish). The same seed and length
give the same forecast.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

REFERENCE_MINUTES = 25.0
"""The night the spans are written for; a night of N minutes scales them by N / 25."""
EARLIEST, LATEST = 0.06, 0.72
"""The share of the night in which events start (the dawn after LATEST is calm)."""
MIN_SPAN_S = 15.0
"""No scaled span is shorter: a shorter outage or lock would end before anyone met it."""


@dataclass(frozen=True)
class Kind:
    """One row of the weather: ``name``, at least ``count`` times, lasting a span drawn
    from ``span`` (seconds at the reference night; None: an instant), acting on one of
    ``targets`` (the credential a provider event hits; () when it hits the tree)."""

    name: str
    count: int
    span: tuple[float, float] | None = None
    targets: tuple[str, ...] = ()


WEATHER: tuple[Kind, ...] = (
    # A provider outage: HTTP 500 for the first half of its span, then 529.
    Kind("outage", 2, (60.0, 300.0), ("claude", "codex")),
    # A usage window closes; its reset is stated (Codex: only as a clock time).
    Kind("claude-window", 2, (60.0, 180.0), ("claude",)),
    Kind("codex-window", 2, (60.0, 150.0), ("codex",)),
    Kind("tmux-kill-server", 2),
    # Every fractal process SIGKILLed, the tmux server with them; then `fractal resume`
    # from a bare shell (env -i, only PATH and HOME).
    Kind("reboot", 2),
    # The tree's database write-locked by another process for the span.
    Kind("db-lock", 2, (60.0, 60.0)),
    # The operator's verbs, at random.
    Kind("pause", 3),
    Kind("resume", 3),
    Kind("approve", 2),
    Kind("merge", 2),
)


@dataclass(frozen=True, order=True)
class Event:
    """One event of the night: ``at`` seconds after the night began, its ``kind``, its
    ``span`` in seconds (0 for an instant) and its ``target`` ('' for the tree)."""

    at: float
    kind: str
    span: float = 0.0
    target: str = ""


def scale(minutes: float) -> float:
    """The factor spans are multiplied by for a night of ``minutes``."""
    return minutes / REFERENCE_MINUTES


def forecast(seed: str, minutes: float, weather: tuple[Kind, ...] = WEATHER) -> list[Event]:
    """The night's events in time order: ``count`` of each kind (one more for each
    further whole REFERENCE_MINUTES of night), each at a seeded uniform instant in [EARLIEST, LATEST]
    of ``minutes``, its span drawn and scaled (MIN_SPAN_S at least), its target drawn
    from the row's (each target met once before any repeats). Same seed, same list."""
    rng = random.Random(f"{seed}:weather")
    night = minutes * 60.0
    factor = scale(minutes)
    extra = max(0, int(minutes // REFERENCE_MINUTES) - 1)
    out: list[Event] = []
    for kind in weather:
        targets = list(kind.targets)
        rng.shuffle(targets)
        for n in range(kind.count + extra):
            at = round(rng.uniform(EARLIEST * night, LATEST * night), 1)
            span = 0.0
            if kind.span is not None:
                span = round(max(MIN_SPAN_S, rng.uniform(*kind.span) * factor), 1)
            target = targets[n % len(targets)] if targets else ""
            out.append(Event(at, kind.name, span, target))
    return sorted(out)


def counts(events: list[Event]) -> dict[str, int]:
    """Events per kind, in WEATHER's order."""
    return {k.name: sum(1 for e in events if e.kind == k.name) for k in WEATHER}
