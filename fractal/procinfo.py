"""Who a pid is, read from ``/proc`` without psutil: its create time and whether it lives.

The verbs and the read commands ask this of every recorded supervisor (is the pid still
the process that took the node?), and the start path records the pane process's create
time. psutil answers the same questions but costs tens of milliseconds to import, more
than the question itself; ``processes`` (which sends the signals) keeps psutil for its
process trees and delegates these two reads here, so every caller computes the create
time the same way.

A create time is ``starttime / CLK_TCK + btime`` in epoch seconds, the formula psutil uses
on Linux (``starttime`` from ``/proc/<pid>/stat``, ``btime`` from ``/proc/stat``), so a
time recorded by either matches the other. Where ``/proc`` is not mounted the psutil
answer is used instead.
"""

from __future__ import annotations

import functools
import os

CREATE_TIME_TOLERANCE = 0.01  # seconds two create times of one process may differ by
_DEAD_STATES = frozenset({"Z", "X", "x"})  # zombie, dead


@functools.cache
def _boot_time() -> float | None:
    """``btime`` of ``/proc/stat`` (epoch seconds), or None without a readable ``/proc``."""
    try:
        with open("/proc/stat", "rb") as stat:
            for line in stat:
                if line.startswith(b"btime"):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, create time) of ``pid`` from ``/proc/<pid>/stat``; None when there is
    no such process. Raises LookupError when ``/proc`` cannot tell (not mounted)."""
    boot = _boot_time()
    if boot is None or pid <= 0:
        raise LookupError("no /proc")
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        raise LookupError(str(exc)) from None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = data.rsplit(b")", 1)[-1].split()
    try:
        return fields[0].decode(), int(fields[19]) / os.sysconf("SC_CLK_TCK") + boot
    except (IndexError, ValueError) as exc:
        raise LookupError(f"unexpected /proc/{pid}/stat") from exc


def create_time(pid: int) -> float | None:
    """Create time of ``pid`` in epoch seconds (zombies too), or None when there is no
    ``pid``."""
    try:
        found = _stat(pid)
    except LookupError:
        return _psutil_create_time(pid)
    return found[1] if found is not None else None


def same_process(pid: int, created: float) -> bool:
    """True when ``pid`` is alive (not a zombie) and was created at ``created`` (epoch
    seconds, within CREATE_TIME_TOLERANCE)."""
    try:
        found = _stat(pid)
    except LookupError:
        return _psutil_same(pid, created)
    return (found is not None and found[0] not in _DEAD_STATES
            and abs(found[1] - created) <= CREATE_TIME_TOLERANCE)


def _psutil_create_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, ValueError):
        return None


def _psutil_same(pid: int, created: float) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return (proc.status() != psutil.STATUS_ZOMBIE
                and abs(proc.create_time() - created) <= CREATE_TIME_TOLERANCE)
    except (psutil.Error, ValueError):
        return False
