"""Resume adoption: pick up a parked run where it stopped (a pause is not an end: the
run's rows stay open until a resume continues it).

The resumed supervisor keeps the run id, the iteration count and the budgets, re-enters
the interrupted step of the open iteration (or starts the next iteration when the park
fell between iterations), and credits the parked time, and the time of the waits before
the park, back to the run and iteration deadlines. The continuous-mode session map comes back from ``<node_dir>/.session``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from fractal.domain.outage import OUTAGE_EVENT
from fractal.domain.outcome import AWAITING_APPROVAL, Status
from fractal.domain.signals import PauseSpan
from fractal.domain.waits import WAIT_STEP
from fractal.runtime.usagewait import WAIT_EVENT
from fractal.runtime.waitcredit import wait_credits
from fractal.store.ledger import Ledger
from fractal.store.rows import StepRow
from fractal.store.timefmt import to_epoch
from fractal.workspace.nodedir import write_atomic

log = logging.getLogger(__name__)

WAIT_EVENTS = (WAIT_EVENT, OUTAGE_EVENT)
"""The events of the waits whose time is credited to the walls (``waitcredit``)."""

__all__ = ["AWAITING_APPROVAL", "Adoption", "adopt", "load_sessions", "pause_spans",
           "resume_position", "save_sessions"]


@dataclass(frozen=True)
class Adoption:
    """The parked run to continue. Instants are epoch seconds."""

    run_id: int
    run_started: float
    iteration: int  # the last iteration number opened in the run (0: none)
    iter_id: int | None  # the open iteration to re-enter, if any
    iter_started: float | None
    resume_position: int  # first step position to run in the re-entered iteration (1-based)
    pending_gate: StepRow | None  # an unapproved gate parked mid-wait: wait again, don't rerun
    spans: list[PauseSpan] = field(default_factory=list)
    sessions: dict[str, str] = field(default_factory=dict)
    #: Seconds of usage-window and outage waits credited to the run, and to the open
    #: iteration (``waitcredit``): a resume credits them to the walls again.
    waited: float = 0.0
    iter_waited: float = 0.0


def resume_position(steps: list[StepRow]) -> tuple[int, StepRow | None]:
    """(first position to run, a gate parked while awaiting approval and still unapproved).

    Completed work steps count as done; a gate parked ``awaiting approval`` counts as
    done when it was approved while parked; SYNC and WAIT rows never count.
    """
    done = 0
    gate: StepRow | None = None
    for step in steps:
        if step.step_name in ("SYNC", WAIT_STEP):
            continue
        if step.status is Status.COMPLETED:
            done = max(done, step.step)
        elif step.status is Status.PAUSED and step.meta.startswith(AWAITING_APPROVAL):
            if step.approved:
                done = max(done, step.step)
                gate = None
            else:
                gate = step
    if gate is not None and gate.step <= done:
        gate = None
    return done + 1, gate


def load_sessions(path: Path) -> dict[str, str]:
    """The saved continuous-mode session map (empty when missing or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def save_sessions(path: Path, sessions: dict[str, str]) -> None:
    """Persist the session map atomically (read back by a resume)."""
    try:
        write_atomic(path, json.dumps(sessions, sort_keys=True) + "\n")
    except OSError as exc:
        log.warning("could not save the session map %s: %s", path, exc)


def adopt(ledger: Ledger, node: str, session_path: Path) -> Adoption | None:
    """The adoption plan for ``node``'s open run, or None when there is no open run."""
    run = ledger.open_run_of(node)
    if run is None:
        return None
    iterations = ledger.iterations_of(run.run_id)
    last = iterations[-1] if iterations else None
    spans = pause_spans(ledger, node, run.run_id)
    sessions = load_sessions(session_path)
    waited = wait_credits(ledger, node, run.run_id, WAIT_EVENTS)
    if last is None or last.ended_at is not None:
        return Adoption(run.run_id, to_epoch(run.started_at), last.iter if last else 0, None,
                        None, 1, None, spans, sessions, waited)
    position, gate = resume_position(ledger.steps_of_iteration(last.iter_id))
    return Adoption(run.run_id, to_epoch(run.started_at), last.iter, last.iter_id,
                    to_epoch(last.started_at), position, gate, spans, sessions, waited,
                    wait_credits(ledger, node, run.run_id, WAIT_EVENTS, last.iter_id))


def pause_spans(ledger: Ledger, node: str, run_id: int) -> list[PauseSpan]:
    """Parked spans of a run: each ``pause`` event the loop wrote when parking (metadata
    ``parked``) up to the next completed ``resume`` event; an open span runs to now."""
    spans: list[PauseSpan] = []
    start: float | None = None
    for event in ledger.events_of(node, run_id, ("pause", "resume")):
        if event.event == "pause" and event.meta.startswith("parked") and start is None:
            start = to_epoch(event.created_at)
        elif event.event == "resume" and event.status == "completed" and start is not None:
            spans.append(PauseSpan(start, to_epoch(event.created_at)))
            start = None
    if start is not None:
        spans.append(PauseSpan(start, None))
    return spans
