"""Provider outages: which failed launches are an outage to wait out, how long each wait
lasts, and how the wait is worded (its event, the pane, ``node status``, the inbox).

A launch whose final report is a transient API failure (``agent_errors.TRANSIENT_KINDS``:
a 429 that is not a usage window, 5xx, 529 overloaded, a refused or reset connection, a
failed DNS lookup) says the provider is down, not that the step is wrong: the run waits
and launches the step again, with no retry spent and no failed iteration counted. The
waits double from ``outage_backoff`` seconds (attempt 1) up to ``max_outage_backoff``.
Pure: numbers and strings in, numbers and strings out; instants are epoch seconds.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import NamedTuple

from fractal.domain.agent_errors import TRANSIENT_KINDS

__all__ = [
    "CUT_SHORT",
    "OUTAGE_EVENT",
    "OUTAGE_PROBE_STALE",
    "OutageAction",
    "OutageRow",
    "OutageState",
    "cut_short_hint",
    "decide_outage",
    "is_outage",
    "outage_backoff",
    "outage_detail",
    "outage_label",
    "outage_over_notice",
    "stamp",
]

OUTAGE_EVENT = "outage_wait"
"""The event an outage wait writes: ``started`` (metadata: ``outage_detail``) while it
waits, ``completed`` at its end (metadata: how it ended)."""

CUT_SHORT = "fractal node pause {node} && fractal node resume {node}"
"""The command that cuts a node's outage wait short: the resumed run probes at once."""


def cut_short_hint(detail: str, node: str) -> str:
    """``<detail>; to launch now: fractal node pause N && fractal node resume N``."""
    return f"{detail}; to launch now: {CUT_SHORT.format(node=node)}"


def is_outage(kind: str | None, status: int | None) -> bool:
    """True when a failed launch's API error is one a later launch may get past: its
    kind is transient (rate_limit, overloaded, server_error, connection), or, with no
    kind, its HTTP status is 429 or 5xx. A usage-window stop (``usage_limit``) is its own
    wait, never an outage; auth and bad_request fail as before."""
    if kind is not None:
        return kind in TRANSIENT_KINDS
    return status is not None and (status == 429 or 500 <= status <= 599)


def outage_backoff(attempt: int, first: int, cap: int) -> float:
    """Seconds to wait before launch ``attempt + 1`` after ``attempt`` failures in a row
    (attempt 1, 2, 3 ...): ``first`` doubled at each attempt, never above ``cap``
    (seconds; a cap below ``first`` caps the first wait too). ``attempt`` below 1 counts
    as 1."""
    step = max(1, attempt) - 1
    return float(min(cap, first * (2 ** min(step, 40))))


def outage_label(kind: str | None, status: int | None) -> str:
    """``HTTP 529`` when the CLI named a status, else the failure class (``connection``)."""
    if status is not None:
        return f"HTTP {status}"
    return kind or "unknown"


def stamp(instant: float) -> str:
    """``2026-12-07 01:23:45Z``: the UTC date and time of an epoch instant."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(instant))


def outage_detail(label: str, attempt: int, until: float) -> str:
    """``waiting out a provider outage (HTTP 529, attempt 4) until 2026-12-07 01:23:45Z``
    (``until`` epoch s): the wait's event metadata, shown by ``node status``."""
    return f"waiting out a provider outage ({label}, attempt {attempt}) until {stamp(until)}"


def outage_over_notice(label: str, attempts: int, seconds: float) -> str:
    """``provider outage over (HTTP 529, 4 attempts, 3m 10s)``: the notice of its end."""
    whole = max(0, int(seconds))
    span = f"{whole // 60}m {whole % 60}s" if whole >= 60 else f"{whole}s"
    return f"provider outage over ({label}, {attempts} attempt{'s' * (attempts != 1)}, {span})"


class OutageState(Enum):
    """The shared outage row's state: ``waiting`` until its wake instant, then
    ``probing`` while one node's launch finds out whether the provider is back."""

    WAITING = "waiting"
    PROBING = "probing"


class OutageRow(NamedTuple):
    """A credential's outage as the nodes share it (``provider_outages``): its label
    (``HTTP 529``), the failed launches in a row so far, the instant of the next launch
    (epoch s), the node holding the probe and since when, who recorded it last."""

    credential: str
    label: str
    attempts: int
    wake_at: float
    state: OutageState
    prober: str | None
    probe_started: float | None
    closed_by: str | None


class OutageAction(Enum):
    """What a node does at an outage check: launch (no outage), probe, or wait."""

    LAUNCH = "launch"
    PROBE = "probe"
    WAIT = "wait"


OUTAGE_PROBE_STALE = 900.0
"""Seconds after which a probe that neither got through nor failed is taken as lost (its
node died or parked): another node may take the probe."""


def decide_outage(row: OutageRow | None, node: str, now: float,
                  poll: float) -> tuple[OutageAction, float | None]:
    """What ``node`` does at ``now`` about its credential's outage ``row``, and until
    when it waits (epoch s; None unless waiting).

    No row: launch. Waiting before its wake instant: wait until then. Waiting past it:
    probe (the caller claims it). Probing by this node: probe; by another: wait ``poll``
    seconds and look again, or take the probe once it went silent for
    ``OUTAGE_PROBE_STALE`` seconds."""
    if row is None:
        return OutageAction.LAUNCH, None
    if row.state is OutageState.WAITING:
        if now >= row.wake_at:
            return OutageAction.PROBE, None
        return OutageAction.WAIT, row.wake_at
    if row.prober == node:
        return OutageAction.PROBE, None
    started = row.probe_started if row.probe_started is not None else now
    if now - started >= OUTAGE_PROBE_STALE:
        return OutageAction.PROBE, None
    return OutageAction.WAIT, now + poll
