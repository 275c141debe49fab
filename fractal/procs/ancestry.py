"""A process's ancestry, read from ``/proc``: its parent chain and create times.

Cheap on purpose (no psutil, no subprocess): a verb reads it to learn which node's
supervisor it descends from (``fractal.domain.authority.loop_by_ancestry``). A supervisor
is a child subreaper, so whatever its agent starts (double-forked, ``setsid``) stays a
descendant of it while it lives.

Create times are epoch seconds computed the way psutil computes them on Linux (the boot
time from ``/proc/stat`` plus the process's start in clock ticks), so they compare with
the ``supervisor_started`` a supervisor records for itself. Linux; elsewhere the chain is
empty and no process is ever read as inside a loop.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Container
from functools import lru_cache
from pathlib import Path

__all__ = ["lineage", "tmux_pane"]

_PROC = Path("/proc")
_MAX_DEPTH = 256  # no real chain is this deep; a bound against a /proc that loops


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, ...)."""
    try:  # os.open/os.read: a quarter of pathlib's cost, and a walk reads several
        fd = os.open(f"{_PROC}/{pid}/stat", os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    _, paren, rest = raw.rpartition(b")")  # the command name may hold spaces and ')'
    return rest.decode("ascii", "replace").split() if paren else None


@lru_cache(maxsize=1)
def _boot_time() -> float | None:
    try:
        for line in (_PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _create_time(fields: list[str]) -> float | None:
    boot = _boot_time()
    try:
        ticks = float(fields[19])  # starttime: field 22 of stat, 20th after the name
    except (IndexError, ValueError):
        return None
    return None if boot is None else boot + ticks / os.sysconf("SC_CLK_TCK")


def lineage(pid: int, wanted: Container[int]) -> list[tuple[int, float | None]]:
    """``pid`` and its ancestors, nearest first, as ``(pid, create time)``; the create
    time (epoch seconds) is read only for pids in ``wanted`` (None for the others, and for
    a zombie or a process that vanished mid-walk). Stops at pid 1 or at an unreadable
    entry; empty when ``pid`` cannot be read."""
    chain: list[tuple[int, float | None]] = []
    current = pid
    while current > 0 and len(chain) < _MAX_DEPTH:
        fields = _stat_fields(current)
        if fields is None:
            break
        alive = bool(fields) and fields[0] not in ("Z", "X")
        chain.append((current, _create_time(fields) if alive and current in wanted
                      else None))
        try:
            parent = int(fields[1])
        except (IndexError, ValueError):
            break
        if parent == current:
            break
        current = parent
    return chain


def _read(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, 65536)
        finally:
            os.close(fd)
    except OSError:
        return b""


def _server_socket(server: int) -> Path:
    """The socket of the tmux server ``server``: its first client's ``-S PATH`` (as
    fractal starts its servers) or ``-L NAME``, else the default
    ``${TMUX_TMPDIR:-/tmp}/tmux-<uid>/default`` from the server's own environment."""
    argv = [a.decode("utf-8", "replace") for a in _read(f"{_PROC}/{server}/cmdline").split(b"\0")]
    env = dict(entry.decode("utf-8", "replace").partition("=")[::2]
               for entry in _read(f"{_PROC}/{server}/environ").split(b"\0") if b"=" in entry)
    base = Path(env.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
    for flag, value in itertools.pairwise(argv):
        if flag == "-S":
            return Path(value)
        if flag == "-L":
            return base / value
    return base / "default"


def tmux_pane(pid: int) -> tuple[Path, int] | None:
    """(the socket of the tmux server ``pid`` runs below, the pid of its pane's first
    process) when ``pid`` descends from a tmux server, else None (read from ``/proc``:
    the server's command name is ``tmux: server``)."""
    chain = lineage(pid, ())
    for below, (ancestor, _) in itertools.pairwise(chain):
        if _read(f"{_PROC}/{ancestor}/comm").strip() == b"tmux: server":
            return _server_socket(ancestor), below[0]
    return None
