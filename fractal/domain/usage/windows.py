"""Usage-limit windows: what a closed subscription window means for the loop.

A subscription (Claude Max/Pro, ChatGPT Plus/Pro) grants a number of requests per
rolling window (five hours, seven days). When the window is used up the CLI stops at
once and says when it reopens. Such a stop is not a failure of the agent: the loop waits
for the reset instant and re-enters the step with its session, and every other node
using the same credential waits too instead of finding the closed window itself.

Everything here is pure: facts and instants (epoch seconds, UTC) in, values out.

- ``UsageLimit``: a rejected window (``window`` such as ``five_hour``/``seven_day``,
  ``resets_at`` or None when the CLI did not say).
- ``UsageWarning``: a window near its end (``utilization`` in [0, 1]).
- ``credential_key``: the fingerprint a window belongs to — backend, auth home, a hash
  of the API key (never the key), provider route.
- ``next_wake``: until when to wait, with bounded backoff once a stated reset has
  passed without the window reopening (stated reset times drift).
- ``decide``: given the shared window row of a credential, whether this node launches,
  waits, or is the one probe that tests the reopened window for everyone.
- ``clock_reset``: the reset a clock time stated to the minute means (``try again at
  12:07 AM``): the current minute's end, never the next day.
- ``wait_refusal``: why a wait is refused before it starts (it would outlast
  ``max_usage_wait``).
- ``until_label``: the end of a wait as views print it, with the date only when it is not
  today.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from fractal.domain.durations import format_duration
from fractal.domain.usage.pause_at import parse_pause_at  # re-exported: the setting's parser
from fractal.domain.values import by_type

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MOST",
    "CLOCK_PAST",
    "PROBE_POLL",
    "PROBE_STALE",
    "RELEASE_BATCH",
    "RELEASE_GAP",
    "RESUME_JITTER",
    "UNKNOWN_WINDOW",
    "Action",
    "Decision",
    "UsageLimit",
    "UsageWarning",
    "WindowRow",
    "WindowState",
    "backoff",
    "clock_reset",
    "credential_key",
    "decide",
    "launch_credential",
    "limit_reason",
    "next_wake",
    "over_wait_reason",
    "parse_pause_at",
    "should_pause_early",
    "until_label",
    "utc_label",
    "wait_refusal",
]

UNKNOWN_WINDOW = "unknown"
"""The window name recorded when the CLI named none."""
RESUME_JITTER = 5.0
"""Seconds past a stated reset before the probe launches (a reset is not exact)."""
BACKOFF_FIRST = 60.0
"""Seconds waited after a probe that hit the window again, or when no reset was stated."""
BACKOFF_MOST = 1800.0
"""The longest single backoff wait, seconds (doubling from ``BACKOFF_FIRST``)."""
PROBE_STALE = 900.0
"""Seconds after which a probe that never reported is taken as lost (its node died)."""


@by_type
class UsageLimit(NamedTuple):
    """A closed usage window: the CLI refused the request until ``resets_at``."""

    window: str = UNKNOWN_WINDOW
    resets_at: float | None = None


@by_type
class UsageWarning(NamedTuple):
    """A window close to its limit: ``utilization`` of it used (0..1)."""

    utilization: float
    window: str = UNKNOWN_WINDOW
    resets_at: float | None = None


class WindowState(StrEnum):
    """The state of one credential's window row."""

    CLOSED = "closed"  # a node hit the limit; everyone waits until resets_at
    PROBING = "probing"  # the reset passed; one node (``prober``) is testing it
    OPEN = "open"  # the probe got through; everyone launches again


@by_type
class WindowRow(NamedTuple):
    """The shared facts of one credential's window (one database row).

    ``resets_at`` is the reset the CLI stated (None: it stated none); ``wake_at`` is the
    instant the next probe may launch; ``opened_at`` is when a probe got through.
    """

    credential: str
    window: str
    resets_at: float | None
    state: WindowState
    wake_at: float
    prober: str | None = None
    probe_started: float | None = None
    misses: int = 0  # probes that found the window still closed since it first closed
    opened_at: float | None = None


class Action(StrEnum):
    """What a node does at a step boundary for its credential."""

    LAUNCH = "launch"
    WAIT = "wait"
    PROBE = "probe"


@by_type
class Decision(NamedTuple):
    """``action``, and for WAIT the instant (epoch s) at which to look again."""

    action: Action
    until: float | None = None


RELEASE_BATCH = 3
"""Nodes released together once a probe got through the reopened window."""
RELEASE_GAP = 2.0
"""Seconds between two release batches."""
PROBE_POLL = 3.0
"""Seconds a waiting node sleeps between looks while another node probes: the probe's
launch reopens the window when it ends, and the waiters see it within this (one row
read each per look, only for the length of one launch)."""


def credential_key(backend: str, auth_home: str | None, api_key: str | None,
                   route: str | None) -> str:
    """A 16-hex fingerprint of the credential a window belongs to.

    Two nodes share a window when they use the same backend, the same auth home (where
    a subscription login lives) and the same API key and provider route. The key enters
    only through SHA-256, so neither the row nor a log ever holds it.
    """
    import hashlib  # deferred: start-up cost (3 modules)

    material = "\x1f".join((backend, auth_home or "", api_key or "", route or ""))
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:16]


CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY",
                   "CODEX_API_KEY")
"""The environment variables that carry an API key or a subscription token."""
AUTH_HOME_VARS = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "HOME")
"""Where a subscription login lives, first set wins (the user's, before a node's own
agent home is seeded from it)."""


def launch_credential(backend: str, env: Mapping[str, str], route: str | None) -> str:
    """``credential_key`` of a launch of ``backend`` under environment ``env`` and
    provider ``route``: the auth home is the first of AUTH_HOME_VARS set, the key the
    values of CREDENTIAL_VARS."""
    home = next((env[v] for v in AUTH_HOME_VARS if env.get(v)), None)
    key = "\x1e".join(env.get(v, "") for v in CREDENTIAL_VARS)
    return credential_key(backend, home, key if key.strip("\x1e") else None, route)


def backoff(misses: int) -> float:
    """Seconds to wait after ``misses`` (>= 1) probes that found the window still
    closed: 60 s, 120 s, 240 s ... at most 30 min."""
    return float(min(BACKOFF_MOST, BACKOFF_FIRST * 2.0 ** max(0, misses - 1)))


def next_wake(resets_at: float | None, now: float, misses: int = 0,
              jitter: float = RESUME_JITTER) -> float:
    """The instant the next probe may launch.

    A stated reset still ahead: the reset plus ``jitter`` seconds (``RESUME_JITTER``
    unless the caller says otherwise). No stated reset, or one already past (the window
    did not reopen on time): ``now`` plus the bounded backoff for ``misses`` (at least
    one).
    """
    if resets_at is not None and resets_at + jitter > now:
        return resets_at + jitter
    return now + backoff(max(1, misses))


def decide(row: WindowRow | None, node: str, now: float, rank: int = 0,
           probe_poll: float = PROBE_POLL) -> Decision:
    """What ``node`` does before its next launch, given its credential's window ``row``.

    - No row: launch.
    - Closed, before ``wake_at``: wait until it. Closed, at or past it: probe (the caller
      claims the row with a compare-and-set, so exactly one node probes).
    - Probing by this node: probe. By another: wait ``probe_poll`` seconds (``PROBE_POLL``
      unless the caller says otherwise) and look
      again; a probe silent for ``PROBE_STALE`` seconds is taken as lost and this node
      probes instead.
    - Open: launch, ``RELEASE_BATCH`` nodes at a time, ``RELEASE_GAP`` seconds apart by
      ``rank`` (the node's place among the waiters), so a reopened window is not hit by
      the whole tree in one instant.
    """
    if row is None:
        return Decision(Action.LAUNCH)
    if row.state is WindowState.OPEN:
        if row.opened_at is None:
            return Decision(Action.LAUNCH)
        release = row.opened_at + (max(0, rank) // RELEASE_BATCH) * RELEASE_GAP
        return Decision(Action.LAUNCH) if now >= release else Decision(Action.WAIT, release)
    if row.state is WindowState.CLOSED:
        if now < row.wake_at:
            return Decision(Action.WAIT, row.wake_at)
        return Decision(Action.PROBE)
    if row.prober == node:
        return Decision(Action.PROBE)
    started = row.probe_started if row.probe_started is not None else now
    if now - started >= PROBE_STALE:
        return Decision(Action.PROBE)
    return Decision(Action.WAIT, now + min(probe_poll, PROBE_STALE - (now - started)))


def should_pause_early(warning: UsageWarning | None, pause_at: float | None) -> bool:
    """True when the last step reported a window used at or above ``pause_at``."""
    return warning is not None and pause_at is not None and warning.utilization >= pause_at


def utc_label(instant: float | None) -> str:
    """``2026-12-01T14:05:00Z`` for an epoch instant; ``an unstated time`` for None."""
    if instant is None:
        return "an unstated time"
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def limit_reason(limit: UsageLimit, until: float | None = None) -> str:
    """The step reason of a usage-limit stop: ``usage limit (five_hour) until <UTC>``."""
    return f"usage limit ({limit.window}) until {utc_label(until or limit.resets_at)}"


def over_wait_reason(max_wait: int) -> str:
    """The run reason when a window stayed closed longer than ``max_wait`` seconds."""
    return f"usage window did not reopen within {format_duration(max_wait)}"


CLOCK_PAST = 900.0
"""Seconds after the end of a stated clock minute during which that minute still counts as
just past (its end is the reset, already passed: the loop backs off and probes), not as
the same time tomorrow."""


def clock_reset(hour: int, minute: int, now: datetime) -> datetime:
    """The reset a clock time stated to the minute (``hour``:``minute``, 24-hour, in the
    same local time as ``now``, a naive datetime) means, as a naive local datetime.

    The rule: a stated minute is a span of sixty seconds, and the window reopens at some
    instant inside it. So
    - a minute still ahead today: its start (the stated time as written);
    - the minute ``now`` is in, or one that ended at most ``CLOCK_PAST`` seconds ago: its
      end (the probe goes after the minute is over; an end already past makes the loop
      back off and probe, as for any reset that passed);
    - a minute further back: the same minute tomorrow.
    ``try again at 12:07 AM`` read at 00:07:29 is 00:08:00 today, never 00:07 tomorrow.
    """
    start = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if start > now:
        return start
    end = start + timedelta(minutes=1)
    if (now - end).total_seconds() <= CLOCK_PAST:
        return end
    return start + timedelta(days=1)


def until_label(instant: float, now: float) -> str:
    """The end of a wait as views print it (UTC, to the second): ``14:05:05Z`` when
    ``instant`` falls on the same UTC day as ``now``, ``2026-12-08 00:07:05Z`` on any
    other day (epoch seconds both), so a wait that lasts into tomorrow never reads as
    one already past."""
    when, today = datetime.fromtimestamp(instant, UTC), datetime.fromtimestamp(now, UTC)
    if when.date() == today.date():
        return when.strftime("%H:%M:%SZ")
    return when.strftime("%Y-%m-%d %H:%M:%SZ")


def wait_refusal(resets_at: float | None, wake_at: float, now: float, max_wait: int,
                 credential: str = "CREDENTIAL") -> str | None:
    """Why a usage-window wait until ``wake_at`` is refused at ``now`` (epoch s), or None.

    The rule: a wait whose end is known, a reset the CLI stated (``resets_at`` not None),
    and lies more than ``max_wait`` seconds (the ``max_usage_wait`` setting) ahead is
    refused before it starts, since waiting ``max_wait`` first would end the run the same
    way, later. A backoff after no stated reset is the loop's own guess, not a known end:
    it is never refused here (the wait gives up once it has lasted ``max_wait``). The
    reason names the instant, the setting and what to do (``credential`` is the window's
    fingerprint, as ``fractal usage reopen`` takes it).
    """
    if resets_at is None or wake_at - now <= max_wait:
        return None
    return (f"usage window reopens at {utc_label(wake_at)}, beyond max_usage_wait "
            f"({format_duration(max_wait)}): raise max_usage_wait and start the node again, "
            f"or `fractal usage reopen {credential}` if it reopened sooner")
