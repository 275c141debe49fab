"""Signal names and which one wins at a checkpoint (docs/lifecycle.md, "Steering").
Pure: the loop reads the pending names from the database and asks here."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum


class Signal(StrEnum):
    """Signal rows a verb writes for a node's run; ``exit`` is written by the loop itself,
    ``done`` by the node's own agent (``fractal node done``: it ends its own run)."""

    PAUSE = "pause"
    FINISH = "finish"
    STOP = "stop"
    KILL = "kill"
    EXIT = "exit"
    DONE = "done"


PARKING = "parking: "
"""How the metadata of the ``started`` pause event begins when a signal to the supervisor
tears a step down (``parking: interrupted: SIGINT``): the loop writes it
(``runtime/parking.py``) and ``node status`` reads it (``active (pausing: ...)``)."""


#: Pause always outranks finish, which outranks stop (at every checkpoint); the node's own
#: ``done`` comes last: what the operator asked of the run names its end.
PRECEDENCE: tuple[Signal, ...] = (Signal.KILL, Signal.PAUSE, Signal.FINISH, Signal.STOP,
                                  Signal.DONE)


def winning(pending: Collection[str], *, allow_finish: bool = True,
            allow_stop: bool = True) -> Signal | None:
    """The signal that acts at a checkpoint, or None.

    ``pending`` holds the names present for the run. ``allow_finish`` is False where a
    finish does not act (an adopted iteration's top, inside an iteration); ``allow_stop``
    is False before the first step of an iteration (a finish then ends the run before any
    step). A ``done`` acts wherever a stop does: after the step its agent declared it in.
    """
    for signal in PRECEDENCE:
        if signal.value not in pending:
            continue
        if signal is Signal.FINISH and not allow_finish:
            continue
        if signal in (Signal.STOP, Signal.DONE) and not allow_stop:
            continue
        return signal
    return None


def decoration(status: str, pending: Iterable[str]) -> str:
    """The status shown by ``node status``/``list``: ``active (pausing)`` and the like."""
    if status != "active":
        return status
    names = set(pending)
    for signal, word in ((Signal.KILL, "killing"), (Signal.PAUSE, "pausing"),
                         (Signal.FINISH, "finishing"), (Signal.STOP, "stopping"),
                         (Signal.DONE, "ending")):
        if signal.value in names:
            return f"active ({word})"
    return status


@dataclass(frozen=True)
class PauseSpan:
    """One parked span of a run: epoch seconds; ``end`` None while still parked."""

    start: float
    end: float | None


def paused_seconds(spans: Iterable[PauseSpan], anchor: float, now: float) -> float:
    """Seconds of ``spans`` that fall between ``anchor`` and ``now`` (the pause credit of the time walls).

    A trailing open span accrues up to ``now``; spans before ``anchor`` are clipped.
    """
    total = 0.0
    for span in spans:
        start = max(span.start, anchor)
        end = now if span.end is None else min(span.end, now)
        if end > start:
            total += end - start
    return total


def credited_deadline(started: float, limit: int | None, paused: float) -> float | None:
    """A wall's deadline (epoch s) once ``paused`` seconds are credited back (parked time
    is never charged to a time wall). None when the wall is unset."""
    return None if limit is None else started + limit + paused


def attribution(verb: str, actor: str, reason: str | None) -> str:
    """``killed by <actor>[: reason]`` style attribution for a verb's row metadata."""
    past = {"kill": "killed", "stop": "stopped", "pause": "paused", "finish": "finished"}
    text = f"{past.get(verb, verb)} by {actor}"
    return f"{text}: {reason}" if reason else text


def fanout_reason(reason: str | None, verb: str, origin: str) -> str:
    """A descendant's reason in a fan-out: ``<reason> (via <verb> of <branch>)``."""
    base = reason or f"{verb} requested"
    return f"{base} (via {verb} of {origin})"
