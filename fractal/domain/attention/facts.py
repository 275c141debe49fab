"""The facts the attention rules read about one node (``domain.attention.rules``): its newest
run, open gates, failed merge, usage-window wait, unread messages to the operator and
its children's state, as the store reads them. Pure values; instants are epoch seconds,
spend USD (None unknown)."""

from __future__ import annotations

from dataclasses import dataclass

from fractal.domain.run.subtree import Unsettled

__all__ = ["Gate", "HandBack", "NodeFacts", "Note", "OutageHold", "UsageHold", "is_hand_back",
           "merged_detail", "shows_merged"]


@dataclass(frozen=True)
class Gate:
    """A step awaiting its parent's approval: row id, name, when its approval wait began
    (epoch s; when the step opened for a gate from before that was recorded), the
    ``diffstat`` of the node's branch against its parent's (None when unknown)."""

    step_id: int
    step_name: str
    since: float
    diffstat: str | None = None


@dataclass(frozen=True)
class HandBack:
    """The node's newest ``merges`` row when it did not land (status ``failed``): its id,
    the target, the reason (a conflict, a hand-back, a rolled-back interruption) and
    when it was booked (epoch s)."""

    merge_id: int
    target: str
    reason: str
    since: float
    unresolved: str | None = None
    """The child's worktree path when it still holds the handed-back merge, unresolved."""

    @property
    def handed_back(self) -> bool:
        """True when the conflict was handed to the child's loop to resolve (a refused
        merge, ``refused: ...``, was not, though its reason may speak of an earlier one)."""
        return is_hand_back(self.reason)


def is_hand_back(reason: str) -> bool:
    """True when a failed merge's ``reason`` says the conflict was handed to the child's
    loop to resolve (a refused merge, ``refused: ...``, was not, though its reason may
    speak of an earlier one)."""
    return "handed back" in reason and not reason.startswith("refused:")


@dataclass(frozen=True)
class UsageHold:
    """An open usage-window wait of the node's run: its ``usage_wait`` event id, when it
    began and until when (epoch s; None unknown), and the window's name."""

    event_id: int
    since: float
    until: float | None
    window: str = ""


@dataclass(frozen=True)
class OutageHold:
    """An open provider-outage wait of the node's run: its ``outage_wait`` event id, when
    it began (epoch s) and its line (``waiting out a provider outage (HTTP 529, attempt
    4) until 2026-12-07 01:23:45Z``)."""

    event_id: int
    since: float
    shown: str


@dataclass(frozen=True)
class Note:
    """A radio message a node sent to the operator (the root's ``inbox``), still unread
    by the operator: its id, subject, priority and when it was sent (epoch s)."""

    uuid: str
    subject: str
    since: float
    priority: int = 5


@dataclass(frozen=True)
class NodeFacts:
    """What the store knows about one node, for the detectors.

    ``run_*`` describe its newest run (``run_id`` None: it never ran; ``run_started`` and
    ``run_ended`` epoch s, None unknown or still running); ``run_spent`` USD
    of that run's own steps, None when no step recorded a cost. ``last_write`` is the
    newest instant the node wrote anything (a row, its pane transcript); ``gone`` is True
    for an active node whose supervisor is provably gone (shown, never written).
    ``paused_since``/``pause_reason`` come from its newest ``pause`` event (the loop's
    ``parked ...``); ``pause_asked`` is the reason given with the pause that parked it
    (``fractal node pause --reason``), empty when none was.
    ``merge`` is its newest merge when that failed; ``usage`` its run's open usage-window
    wait, ``outage`` its open provider-outage wait; ``running_below`` its descendants still running, and once its newest run ended
    only those whose own current run had begun by then (``with_running_below`` fills
    it from the whole tree's facts, ``domain.attention.tree``); ``to_operator`` its messages the operator has not
    read, oldest first. ``waiting_children`` is True while its loop waits for its
    children (an open ``WAIT`` step); ``unstarted`` its direct children that are idle and
    never ran (``with_running_below`` fills it): nothing starts them but a command.
    ``merged_at`` is when its newest merge landed (None: none did, or the newest failed),
    ``merged_into`` that merge as ``merged_detail`` words it (empty: none landed).
    ``top_level`` is True for a node whose parent is the tree's root (the operator merges
    it), ``parent`` its parent's branch; ``parent_running`` is True while that parent is
    a running agent loop (a node, active, its supervisor not gone: ``with_running_below``
    fills it). ``waiting_since`` is when its open ``WAIT`` step began (epoch s, None: it
    does not wait); ``paused_by_operator`` when the operator asked for the pause that
    parked it (epoch s; None: the pause was the loop's or a node's).
    ``run_cause`` is, for an exited run, the reason of its newest failed step beside the
    run's own (``step EXECUTE failed: ...``, ``domain.run.failcause``), else empty.
    ``unmerged_below`` is what its newest run's ``completed`` end found of its subtree's
    work never merged into it (the labels ``node merge`` refuses it over, joined by
    ``; ``; empty: none, or the run did not complete).
    ``braked`` is True while the tree-wide brake is on (``fractal pause``): ``node
    resume`` and ``node start`` are refused then, and only ``fractal resume`` lifts it.
    """

    branch: str
    status: str
    run_id: int | None = None
    run_status: str | None = None
    run_exit: int | None = None
    run_reason: str = ""
    run_started: float | None = None
    run_ended: float | None = None
    run_spent: float | None = None
    run_cap: float | None = None
    gates: tuple[Gate, ...] = ()
    last_write: float | None = None
    step_timeout: int | None = None
    gone: bool = False
    paused_since: float | None = None
    pause_reason: str = ""
    pause_asked: str = ""
    title: str = ""
    merge: HandBack | None = None
    usage: UsageHold | None = None
    outage: OutageHold | None = None
    running_below: tuple[Unsettled, ...] = ()
    to_operator: tuple[Note, ...] = ()
    waiting_children: bool = False
    unstarted: tuple[str, ...] = ()
    merged_at: float | None = None
    braked: bool = False
    run_cause: str = ""
    merged_into: str = ""
    top_level: bool = False
    parent: str = ""
    parent_running: bool = False
    waiting_since: float | None = None
    paused_by_operator: float | None = None
    unmerged_below: str = ""


def merged_detail(target: str, sha: str) -> str:
    """What ``node status``, ``node list`` and the dashboard say of a node whose newest
    merge landed and which has not run since: ``merged into main (3f2a9c1)`` (the commit
    it landed as, 7 hex digits; without them when unknown)."""
    return f"merged into {target} ({sha[:7]})" if sha else f"merged into {target}"


def shows_merged(status: str, merged_at: str | None, run_started: str | None) -> bool:
    """True when a node reads as merged: it is settled (not active or paused), and its
    newest merge landed (``merged_at``, stored ISO text) no earlier than its newest run
    began (``run_started``; None: it never ran). A run started after the merge ends it."""
    if merged_at is None or status in ("active", "paused"):
        return False
    return run_started is None or merged_at >= run_started
