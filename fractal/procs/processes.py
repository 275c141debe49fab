# Over 400 lines: the one module that sends signals; spawning, finding, stopping and
# reaping share its identity checks (create time, marker) and its grace table.
"""Process groups: spawn, stream, stop and reap (the only module that sends signals).

Every child fractal starts (an agent attempt, ``setup.sh``) runs in a new session (pid ==
pgid) with ``FRACTAL_LAUNCH_ID=<marker>`` in its environment. One stop sequence serves all:
snapshot targets, TERM, wait the grace (``GRACES``), KILL survivors, report who is left.
Targets are found three ways, each covering another's blind spot: the process group (misses a
``setsid`` descendant), the leader's descendants (miss orphans reparented away), the marker
(misses a process that scrubbed its environment). A handle records the leader's create time;
when its pid now names another process (recycled), nothing is signalled by pid or pgid, only
by marker. A per-process signal re-checks the target's create time first (as psutil does), so
a recycled pid is never signalled. Linux.

The stop sequence knows its targets as ``procinfo.Proc`` (pid, create time read from
``/proc``) rather than ``psutil.Process``: ``fractal node kill`` stops groups and never
needs psutil, which costs tens of milliseconds to import. psutil is imported only where it
answers what ``/proc`` alone does not here: the public ``psutil.Process`` lists
(``marked_processes``, ``environ_processes``), reaping our own children, and the fallbacks
for a kernel without per-thread ``children`` lists.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

from fractal.errors import SpawnError
from fractal.procs import procinfo

if TYPE_CHECKING:
    import psutil

LAUNCH_MARKER_ENV = "FRACTAL_LAUNCH_ID"


class Reap(StrEnum):
    """Why fractal stops a group of processes; each reason has its grace in ``GRACES``."""

    STEP = "step"  # an agent, check or setup command past its wall, or stopped by the loop
    KILL = "kill"  # `fractal node kill`: one shared window for a whole subtree
    HEAL = "heal"  # a crash heal reaping what a dead loop left running
    EXIT = "exit"  # the supervisor's own exit sweep of whatever it still has running


GRACES: Mapping[Reap, float] = {Reap.STEP: 10.0, Reap.KILL: 5.0, Reap.HEAL: 2.0,
                                Reap.EXIT: 2.0}
"""Seconds from SIGTERM to SIGKILL per reason (``grace`` applies the STEP override)."""
GRACE_ENV, MAX_GRACE = "FRACTAL_KILL_GRACE", 60.0  # the STEP override, clamped to 0.1-60 s
DEFAULT_GRACE = GRACES[Reap.STEP]  # when a caller configures none


def grace(reason: Reap) -> float:
    """The TERM-to-KILL grace in seconds for ``reason``. For STEP, ``FRACTAL_KILL_GRACE``
    overrides it, clamped to 0.1-60 s (a non-number or non-finite value keeps 10)."""
    default = GRACES[reason]
    try:
        value = float(os.environ.get(GRACE_ENV, default)) if reason is Reap.STEP else default
    except ValueError:
        return default
    return max(0.1, min(MAX_GRACE, value)) if abs(value) != float("inf") and value == value \
        else default

_POLL = 0.05  # seconds between liveness polls while waiting out a grace
_KILL_SETTLE = 2.0  # seconds to wait for SIGKILLed processes to disappear
_DRAIN = 1.0  # seconds a teed pipe is drained after its leader exited
_EXEC_HINTS = {
    errno_mod.ENOENT: "no such file, or its #! interpreter is missing (check PATH and config)",
    errno_mod.EACCES: "permission denied (is it executable? chmod +x)",
    errno_mod.ENOEXEC: "not an executable format (add a #! line)",
}


_P = TypeVar("_P", bound=procinfo.Identified)


@dataclass(frozen=True)
class GroupHandle:
    """Identity of a spawned process group: leader pid (== pgid), create time (epoch s), marker."""

    pid: int
    pgid: int
    create_time: float
    marker: str


def marker_only(marker: str) -> GroupHandle:
    """A handle for a launch known only by its marker (its group not yet recorded, as
    between an agent's spawn and its step row's ``set_step_process``): a stop through it
    signals the processes carrying ``marker`` and nothing by pid or pgid."""
    return GroupHandle(pid=0, pgid=0, create_time=0.0, marker=marker)


@dataclass
class Launched:
    """A running child: its Popen (read ``popen.stdout``; never ``communicate()``) and handle."""

    popen: subprocess.Popen[bytes]
    handle: GroupHandle


def process_create_time(pid: int) -> float | None:
    """Create time of ``pid`` in epoch seconds (zombies too), or None when there is no ``pid``
    (read from ``/proc`` by ``procinfo``, the psutil formula)."""
    return procinfo.create_time(pid)


def same_process(pid: int, create_time: float) -> bool:
    """True when ``pid`` is alive (not a zombie) and was created at ``create_time`` (±0.01 s)."""
    return procinfo.same_process(pid, create_time)


def _start(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], marker: str, stdin: int,
           stderr: int | IO[bytes]) -> Launched:
    """Popen in a new session with the marker; exec-time OSErrors become SpawnError.

    ``PWD`` is set to ``cwd`` (absolute): the process starts in its own worktree, and a
    ``PWD`` inherited from the caller (a parent node's worktree) would tell it otherwise.
    """
    if not argv:
        raise SpawnError("cannot start an empty command; check the agent command in config.json")
    try:
        popen = subprocess.Popen(list(argv), cwd=cwd,
                                 env={**env, "PWD": os.path.abspath(cwd),
                                      LAUNCH_MARKER_ENV: marker},
                                 stdin=stdin, stdout=subprocess.PIPE, stderr=stderr,
                                 start_new_session=True, close_fds=True)
    except ValueError as exc:  # e.g. an embedded NUL in an argument or the environment
        raise SpawnError(f"cannot start {argv[0]!r}: {exc}") from exc
    except OSError as exc:
        why = _EXEC_HINTS.get(exc.errno or 0, exc.strerror or str(exc))
        if exc.errno == errno_mod.ENOENT and str(exc.filename) == str(cwd):
            why = f"working directory {cwd} does not exist"
        raise SpawnError(f"cannot start {argv[0]!r}: {why}", exc.errno) from exc
    created = process_create_time(popen.pid) or 0.0  # not waited on yet: readable even if exited
    return Launched(popen, GroupHandle(popen.pid, popen.pid, created, marker))


def open_log(path: Path) -> IO[bytes]:
    """``path`` opened for writing bytes, created (0644) or truncated, never through a
    symbolic link: the supervisor writes its logs in a node dir an agent worked in, and a
    log swapped for a link must not aim the write elsewhere. Raises OSError (ELOOP for a
    link) when it cannot be opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o644), "wb")


def _feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    """Write ``data`` then close; EPIPE (the child never read, or exited) is not an error."""
    with contextlib.suppress(OSError), pipe:
        pipe.write(data)


def spawn_group(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                stdin_data: bytes | None = None, stderr_path: Path | None = None,
                marker: str | None = None, merge_stderr: bool = False) -> Launched:
    """Start ``argv`` as the leader of a new session; stdout is a binary pipe.

    ``env`` is the whole child environment, plus ``FRACTAL_LAUNCH_ID=<marker>`` (a fresh uuid4
    hex when None). stdin is /dev/null, or ``stdin_data`` written then closed by a daemon thread
    (a huge prompt cannot deadlock us; a child that never reads cannot hang us). stderr goes to
    ``stderr_path`` (truncated; never through a symlink: ``open_log``) or /dev/null, or into stdout with ``merge_stderr``. Raises
    SpawnError(message, errno) on exec failure.
    """
    stdin = subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL
    with contextlib.ExitStack() as stack:
        err: int | IO[bytes] = subprocess.STDOUT if merge_stderr else (
            stack.enter_context(open_log(stderr_path)) if stderr_path else subprocess.DEVNULL)
        launched = _start(argv, cwd=cwd, env=env, marker=marker or uuid.uuid4().hex,
                          stdin=stdin, stderr=err)
    popen = launched.popen
    if stdin_data is not None and popen.stdin is not None:
        threading.Thread(target=_feed_stdin, args=(popen.stdin, stdin_data), daemon=True,
                         name=f"stdin-{popen.pid}").start()
    return launched


def _own_descendants() -> list[int]:
    """Every descendant of this process: its children and theirs, read from the kernel's
    per-thread ``children`` lists (a few small files when the tree is small, as it is
    between steps), or, where the kernel has none, from psutil (which reads the ``stat``
    of every process on the machine)."""
    found = procinfo.descendants(os.getpid())
    return found if found is not None else procinfo.psutil_descendants(os.getpid())


def _marked_pids(marker: str | None, *, own_only: bool = False) -> list[int]:
    # One read of /proc/<pid>/environ per process (about 5 ms for 370; psutil's environ() dicts
    # take about 12 ms) as it runs after every step; mid-exec reads are retried 10 ms apart.
    # ``own_only``: as a subreaper every escapee is our descendant, so only those are read.
    needle = (f"{LAUNCH_MARKER_ENV}={marker}\0" if marker else f"{LAUNCH_MARKER_ENV}=").encode()
    return procinfo.pids_with(needle, _own_descendants() if own_only else procinfo.pids())


def marked_processes(marker: str | None = None) -> list[psutil.Process]:
    """Processes (not zombies, not the caller) with ``FRACTAL_LAUNCH_ID`` (= ``marker`` if set)."""
    return [p for p in map(_psutil_process, _marked_pids(marker)) if p is not None]


def _psutil_process(pid: int) -> psutil.Process | None:
    import psutil  # deferred: start-up cost (psutil, 18 modules)

    with contextlib.suppress(psutil.Error, ValueError):
        return psutil.Process(pid)
    return None


def _send(proc: procinfo.Identified, sig: int) -> None:
    """Send ``sig`` to ``proc`` unless its pid now names another process (or none)."""
    if procinfo.same(proc):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)


def _wait_dead(procs: Iterable[_P], timeout: float) -> list[_P]:
    """Wait until all are gone or zombies, at most ``timeout`` seconds; return the rest (not
    ``psutil.wait_procs``: it would reap our own children and steal their Popen's exit
    status). Watched through pidfds (``procinfo.ExitWatch``): the wait ends with the last
    exit, not on a poll tick; one no pidfd watches is re-checked every ``_POLL`` s."""
    alive = [p for p in procs if not procinfo.is_dead(p)]
    deadline = time.monotonic() + timeout
    by_pid = {p.pid: p for p in alive}
    with procinfo.ExitWatch(list(by_pid), lambda pid: not procinfo.is_dead(by_pid[pid])) as watch:
        while alive and (left := deadline - time.monotonic()) > 0:
            watch.wait(left if watch.covers(len(alive)) else min(_POLL, left))
            alive = [p for p in alive if not procinfo.is_dead(p)]
            watch.keep({p.pid for p in alive})
    return alive


def _trusted(handle: GroupHandle) -> tuple[int | None, procinfo.Proc | None]:
    """(pgid, leader) when the group may be signalled as such, else (None, None): marker only."""
    if handle.pid <= 0:  # ``marker_only``
        return None, None
    leader = procinfo.process(handle.pid)
    if leader is not None:  # alive or a zombie: trusted only if it is the same process
        ours = abs(leader.created - handle.create_time) <= procinfo.CREATE_TIME_TOLERANCE
    else:  # Linux never reuses a pgid while a member lives: a marked member proves it is ours
        members = procinfo.group_members(handle.pgid)  # (an empty group needs no marker scan)
        ours = bool(members) and bool(members & set(_marked_pids(handle.marker)))
    usable = ours and handle.pgid not in (os.getpgid(0), 0, 1)
    return (handle.pgid, leader) if usable else (None, None)


def _snapshot(marker: str, pgid: int | None, leader: procinfo.Proc | None,
              known: dict[int, procinfo.Proc], own_only: bool = False) -> None:
    """Add marked processes, group members and the leader's descendants to ``known``.

    An empty ``marker`` matches nothing (never "every marked process on the machine").
    """
    pids = set(_marked_pids(marker, own_only=own_only)) if marker else set()
    pids |= procinfo.group_members(pgid) if pgid is not None else set()
    if leader is not None:  # re-checks the leader's identity (pid reuse)
        pids.update(procinfo.descendants_of(leader))
    mine = os.getpgid(0)
    for pid in pids - set(known) - {os.getpid()}:
        proc = procinfo.process(pid)
        if proc is not None and procinfo.pgid(pid) not in (None, mine):
            known[pid] = proc


def _signal(pgids: Sequence[int | None], procs: Iterable[procinfo.Identified], sig: int) -> None:
    """Signal each group once (killpg, in order), then each target outside them: never
    twice."""
    sent: set[int] = set()
    for pgid in pgids:
        if pgid is not None and pgid not in sent:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
                sent.add(pgid)
    for proc in procs:
        if sent:
            try:
                if os.getpgid(proc.pid) in sent:
                    continue
            except ProcessLookupError:
                continue
        _send(proc, sig)


_Target = tuple[str, "int | None", "procinfo.Proc | None"]
"""What one stop aims at: (marker, trusted pgid or None, leader or None)."""


def _stop(marker: str, pgid: int | None, leader: procinfo.Proc | None, grace: float,
          soft_signal: int | None = None, soft_grace: float = 0.0,
          own_only: bool = False) -> list[int]:
    return _stop_targets([(marker, pgid, leader)], grace, soft_signal, soft_grace, own_only)


def _stop_targets(targets: Sequence[_Target], grace: float, soft_signal: int | None = None,
                  soft_grace: float = 0.0, own_only: bool = False) -> list[int]:
    """The stop sequence over ``targets`` at once: snapshot, (soft signal to the groups,
    ``soft_grace``), TERM in the targets' order, one shared ``grace``, re-snapshot, KILL."""
    procs: dict[int, procinfo.Proc] = {}
    for marker, pgid, leader in targets:
        _snapshot(marker, pgid, leader, procs, own_only)
    if not procs:
        return []
    pgids = [pgid for _, pgid, _ in targets]
    if soft_signal is not None:
        members: set[int] = set()
        for pgid in pgids:
            members |= procinfo.group_members(pgid) if pgid is not None else set(procs)
        group = [p for pid, p in procs.items() if pid in members]
        _signal(pgids, group, soft_signal)
        _wait_dead(group, soft_grace)
    _signal(pgids, procs.values(), signal.SIGTERM)
    _wait_dead(procs.values(), grace)
    # A group may have died during the grace and its pgid been recycled: only a group
    # still holding one of the known processes (or its leader) is ours to use by pgid.
    targets = [(marker, procinfo.still_held(pgid, leader, procs), leader)
               for marker, pgid, leader in targets]
    for marker, pgid, leader in targets:  # late forks made during the grace
        _snapshot(marker, pgid, leader, procs, own_only)
    alive = [p for p in procs.values() if not procinfo.is_dead(p)]
    if not alive:
        return []
    _signal([pgid for _, pgid, _ in targets], alive, signal.SIGKILL)
    return sorted(p.pid for p in _wait_dead(alive, _KILL_SETTLE))


def kill_group(handle: GroupHandle, *, grace: float, soft_signal: int | None = None,
               soft_grace: float = 0.0) -> list[int]:
    """Stop everything a launch started; return pids still alive afterwards (expected []).

    Targets: the group ∪ the leader's descendants ∪ processes with the handle's marker, never
    the caller or its group; only the marker if the leader's pid was recycled. ``soft_signal``
    (e.g. SIGINT to pause) goes to the group first, which gets ``soft_grace`` s to exit. Then
    TERM, ``grace`` s (see ``grace``), re-snapshot for late forks, KILL, <= 2 s wait.
    """
    return _stop(handle.marker, *_trusted(handle), grace, soft_signal, soft_grace)


def kill_groups(handles: Sequence[GroupHandle], *, grace: float) -> list[int]:
    """``kill_group`` on every one of ``handles`` in one shared window: every target found
    first, TERM to each group in the order given (a caller that lists a loop before the
    agents it runs has the loop signalled first), one ``grace``-second wait for all of
    them, a re-snapshot for late forks, KILL to the survivors; returns the pids still
    alive (expected []). Many groups ignoring TERM cost one grace, not one each."""
    return _stop_targets([(h.marker, *_trusted(h)) for h in handles], grace)


def sweep_marker(marker: str, *, grace: float) -> list[int]:
    """TERM, ``grace`` seconds, KILL every process carrying ``marker``; return survivors' pids.

    Run after an agent exits normally, to reap grandchildren that escaped its group. In a
    subreaper (``become_subreaper``) every escapee is a descendant of this process, so only
    those are read (usually none); otherwise one read of /proc/<pid>/environ per process on
    the machine (~5 ms for 370, more on a busy machine).
    """
    return _stop(marker, None, None, grace, own_only=_SUBREAPER[0])


_SUBREAPER = [False]  # set once this process has become a subreaper


def sweep_descendants(*, grace: float) -> list[int]:
    """TERM, ``grace`` seconds, KILL every descendant of this process; return survivors.

    Only meaningful in a subreaper between steps: orphaned leftovers of an agent (even
    ones that dropped the launch marker) are re-parented to us. A no-op otherwise.
    """
    if not _SUBREAPER[0]:
        return []
    return _term_then_kill([p for pid in _own_descendants()
                            if (p := procinfo.process(pid)) is not None
                            and not procinfo.is_dead(p)], grace)


def stop_processes(procs: list[psutil.Process], *, grace: float) -> list[int]:
    """TERM each of ``procs`` (each signal re-checks the create time, so a recycled pid is
    never signalled), wait ``grace`` s, KILL survivors; return the pids still alive."""
    return _term_then_kill(procs, grace)


def _term_then_kill(procs: Sequence[procinfo.Identified], grace: float) -> list[int]:
    """TERM each of ``procs``, wait ``grace`` s, KILL survivors; return who is left."""
    for proc in procs:
        _send(proc, signal.SIGTERM)
    alive = _wait_dead(procs, grace)
    for proc in alive:
        _send(proc, signal.SIGKILL)
    return sorted(p.pid for p in _wait_dead(alive, _KILL_SETTLE))


def environ_processes(entry: str) -> list[psutil.Process]:
    """Live processes, outside the caller's process group, whose environment holds ``entry``
    (``NAME=value``, matched exactly). One read of /proc/<pid>/environ per process.

    Crash healing looks for ``_NODE=<node_dir>`` with it: what a dead supervisor started
    that no step row records (a ``setup.sh``, a hook), then ``stop_processes`` them.
    """
    mine = os.getpgid(0)
    return [p for pid in procinfo.pids_with(f"{entry}\0".encode(), procinfo.pids())
            if (p := _psutil_process(pid)) is not None and not procinfo.is_dead(p)
            and procinfo.pgid(pid) not in (None, mine)]


def become_subreaper() -> bool:
    """Adopt orphaned descendants (PR_SET_CHILD_SUBREAPER); False if prctl is unavailable."""
    import ctypes  # deferred: a verb that only stops groups never needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _SUBREAPER[0] = int(libc.prctl(36, 1, 0, 0, 0)) == 0  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        _SUBREAPER[0] = False
    return _SUBREAPER[0]


def reap_orphans(keep: Container[int]) -> list[int]:
    """Collect exited children whose pid is not in ``keep``; never blocks; returns their pids.

    ``keep`` must hold every pid a Popen still waits on (reaping one makes its Popen report 0).
    """
    import psutil  # deferred: start-up cost (psutil, 18 modules)

    reaped: list[int] = []
    for child in psutil.Process().children():
        with contextlib.suppress(OSError):  # ChildProcessError: someone else reaped it
            if child.pid not in keep and os.waitpid(child.pid, os.WNOHANG)[0]:
                reaped.append(child.pid)
    return reaped


def group_of(pid: int, create_time: float) -> GroupHandle | None:
    """A handle on the process group led by (or containing) ``pid``, if it is still the
    process created at ``create_time``; None when it is gone or the pid was recycled."""
    if not same_process(pid, create_time):
        return None
    pgid = procinfo.pgid(pid)
    if pgid is None:
        return None
    return GroupHandle(pid=pid, pgid=pgid, create_time=create_time, marker="")
