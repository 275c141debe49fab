"""Codex's session rollout: where the CLI writes its usage-window facts.

``codex exec --json`` prints a closed usage window only as a human sentence; the
machine-readable facts are in the session's rollout file,
``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<stamp>-<thread id>.jsonl``, one JSON event a
line:

- ``event_msg`` / ``task_complete`` with ``error.codex_error_info == "usage_limit_exceeded"``:
  the usage window is closed (a transient 429 reads ``response_too_many_failed_attempts``
  there instead, and stays an ordinary retryable failure);
- ``event_msg`` / ``token_count`` with ``rate_limits.primary``/``secondary``:
  ``used_percent``, ``window_minutes`` and ``resets_at`` (epoch seconds) of each window.

The reset instant of a closed window is the ``resets_at`` of the window at or over 100 %
when the rollout names one; otherwise the instant in the CLI's own error message
(``try again at 11:10 AM`` / ``at Dec 4th, 2026 8:30 PM``, local time of the CLI
process); otherwise unknown (the loop then probes with a bounded backoff).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fractal.agents.base import WindowEvent
from fractal.domain.usage.windows import clock_reset

__all__ = ["RolloutFacts", "find_rollout", "read_rollout", "window_name"]

USAGE_LIMIT_INFO = "usage_limit_exceeded"
MAX_ROLLOUT_BYTES = 32 * 1024 * 1024  # a larger rollout is read from its last 32 MiB only
_WINDOWS = {300: "five_hour", 10080: "seven_day"}
_CLOCK = re.compile(r"try again at (\d{1,2}):(\d{2})\s*([AP]M)\b", re.IGNORECASE)
_DATED = re.compile(r"try again at ([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) "
                    r"(\d{1,2}):(\d{2})\s*([AP]M)\b", re.IGNORECASE)


def window_name(minutes: object) -> str:
    """``five_hour`` for a 300-minute window, ``seven_day`` for 10080, else ``<n>m``."""
    if isinstance(minutes, int | float) and not isinstance(minutes, bool):
        return _WINDOWS.get(int(minutes), f"{int(minutes)}m")
    return "unknown"


@dataclass(frozen=True)
class RolloutFacts:
    """What one launch's rollout says about the usage window.

    ``limit``: the closed window (rejected WindowEvent) or None; ``warning``: the most
    used open window (utilization WindowEvent) or None.
    """

    limit: WindowEvent | None = None
    warning: WindowEvent | None = None


def find_rollout(sessions: Path, thread_id: str | None, since: float) -> Path | None:
    """The rollout file of ``thread_id`` under ``sessions``; without a thread id, the
    newest rollout modified at or after ``since`` (epoch s). None when there is none."""
    if not sessions.is_dir():
        return None
    try:
        files = [p for p in sessions.rglob("rollout-*.jsonl") if p.is_file()]
    except OSError:
        return None
    if thread_id:
        named = [p for p in files if thread_id in p.name]
        if named:
            return max(named, key=_mtime)
    recent = [p for p in files if _mtime(p) >= since]
    return max(recent, key=_mtime) if recent else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def read_rollout(path: Path) -> RolloutFacts:
    """The usage-window facts of the LAST turn recorded in ``path`` (module docstring).
    Unreadable lines are skipped; an unreadable file says nothing."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - MAX_ROLLOUT_BYTES))
            raw = handle.read()
    except OSError:
        return RolloutFacts()
    windows: list[dict[str, object]] = []
    limit_message: str | None = None
    completed_at: float | None = None
    for line in raw.decode("utf-8", "replace").splitlines():
        payload = _payload(line)
        if payload is None:
            continue
        kind = payload.get("type")
        if kind == "token_count":
            windows = _windows(payload.get("rate_limits"))
        elif kind == "task_complete":
            error = payload.get("error")
            info = error.get("codex_error_info") if isinstance(error, dict) else None
            if info == USAGE_LIMIT_INFO and isinstance(error, dict):
                message = error.get("message")
                limit_message = message if isinstance(message, str) else ""
                done = payload.get("completed_at")
                completed_at = float(done) if isinstance(done, int | float) else None
            else:
                limit_message = None
    warning = _warning(windows)
    if limit_message is None:
        return RolloutFacts(warning=warning)
    full = [w for w in windows if _num(w.get("used_percent")) >= 100.0]
    if full:
        chosen = max(full, key=lambda w: _num(w.get("resets_at")))
        limit = WindowEvent(rejected=True, window=window_name(chosen.get("window_minutes")),
                            resets_at=_instant(chosen.get("resets_at")))
    else:
        limit = WindowEvent(rejected=True, resets_at=stated_reset(limit_message, completed_at))
    return RolloutFacts(limit=limit, warning=warning)


def _payload(line: str) -> dict[str, object] | None:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("type") != "event_msg":
        return None
    payload = data.get("payload")
    return payload if isinstance(payload, dict) else None


def _windows(limits: object) -> list[dict[str, object]]:
    if not isinstance(limits, dict):
        return []
    return [w for w in (limits.get("primary"), limits.get("secondary")) if isinstance(w, dict)]


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


def _instant(value: object) -> float | None:
    number = _num(value)
    return number if number > 0 else None


def _warning(windows: list[dict[str, object]]) -> WindowEvent | None:
    if not windows:
        return None
    most = max(windows, key=lambda w: _num(w.get("used_percent")))
    used = _num(most.get("used_percent"))
    if used <= 0:
        return None
    return WindowEvent(rejected=False, window=window_name(most.get("window_minutes")),
                       resets_at=_instant(most.get("resets_at")),
                       utilization=min(1.0, used / 100.0))


def stated_reset(message: str, failed_at: float | None) -> float | None:
    """The reset instant in Codex's own error text, in the local time of this process
    (the CLI's). A bare clock time is stated to the minute and read against ``failed_at``
    (now when None) by ``domain.usage.windows.clock_reset``: ahead today, the minute's start; the
    current minute or one just past, its end; else tomorrow. None when the text names no
    time."""
    base = datetime.fromtimestamp(failed_at) if failed_at else datetime.now()
    dated = _DATED.search(message)
    if dated:
        month, day, year, hour, minute, half = dated.groups()
        try:
            when = datetime.strptime(f"{month} {day} {year} {hour}:{minute} {half.upper()}",
                                     "%b %d %Y %I:%M %p")
        except ValueError:
            return None
        return when.timestamp()
    clock = _CLOCK.search(message)
    if clock:
        hour, minute, half = clock.groups()
        try:
            parsed = datetime.strptime(f"{hour}:{minute} {half.upper()}", "%I:%M %p")
        except ValueError:
            return None
        return clock_reset(parsed.hour, parsed.minute, base).timestamp()
    return None
