"""Who a pid is, read from ``/proc`` without psutil: its create time and whether it lives.

The verbs and the read commands ask this of every recorded supervisor (is the pid still
the process that took the node?), and the start path records the pane process's create
time. psutil answers the same questions but costs tens of milliseconds to import, more
than the question itself; ``processes`` (which sends the signals) delegates these reads
here, so every caller computes the create time the same way.

It also lists a process's descendants from the kernel's per-thread ``children`` files
(``descendants``) and sleeps until watched processes exit (``ExitWatch``, pidfds), the two
reads ``processes`` does around every step and every stop, and answers the rest of what
``processes`` finds its targets with: the pids on the machine, a process group's members,
whose environment holds a launch marker, and a process known by pid and create time
(``Proc``), gone or not, with its descendants. ``processes`` sends the signals.

A create time is ``starttime / CLK_TCK + btime`` in epoch seconds, the formula psutil uses
on Linux (``starttime`` from ``/proc/<pid>/stat``, ``btime`` from ``/proc/stat``), so a
time recorded by either matches the other. Where ``/proc`` is not mounted the psutil
answer is used instead.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import select
import time
from collections.abc import Callable, Container, Iterable, Mapping
from types import TracebackType
from typing import NamedTuple, Protocol

CREATE_TIME_TOLERANCE = 0.01  # seconds two create times of one process may differ by
_DEAD_STATES = frozenset({"Z", "X", "x"})  # zombie, dead
_EXEC_RETRIES, _EXEC_RETRY_DELAY = 5, 0.01  # re-reads (10 ms apart) of a mid-exec environ
_PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flag of a kernel thread


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
    import psutil  # deferred: start-up cost (psutil, 29 modules)

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, ValueError):
        return None


def _psutil_same(pid: int, created: float) -> bool:
    import psutil  # deferred: start-up cost (psutil, 29 modules)

    try:
        proc = psutil.Process(pid)
        return (proc.status() != psutil.STATUS_ZOMBIE
                and abs(proc.create_time() - created) <= CREATE_TIME_TOLERANCE)
    except (psutil.Error, ValueError):
        return False


def descendants(root: int) -> list[int] | None:
    """The pids below ``root`` (children, theirs, ...), read from the kernel's per-thread
    lists ``/proc/<pid>/task/<tid>/children`` (a child is listed under the thread that
    forked it): a few small files for a small tree, where psutil reads the ``stat`` of
    every process on the machine. None when the kernel keeps no such lists."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    found: list[int] = []
    queue = [root]
    while queue:
        pid = queue.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone since its parent listed it
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (OSError, ValueError):  # the thread or the process ended meanwhile
                continue
            found += kids
            queue += kids
    return found


class Identified(Protocol):
    """A process known by pid and create time: a ``psutil.Process`` or a ``Proc``."""

    @property
    def pid(self) -> int: ...

    def create_time(self) -> float: ...


class Proc(NamedTuple):
    """A process as the stop sequence knows it: pid and create time (epoch s, read when
    it was found), the identity every later check and signal compares against."""

    pid: int
    created: float

    def create_time(self) -> float:
        return self.created


def pids() -> list[int]:
    """Every pid on the machine (the numeric entries of ``/proc``)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def environ_has(pid: int, needle: bytes) -> bool | None:
    """Does /proc/<pid>/environ hold an entry starting with ``needle``? None: cannot tell yet.

    Mid-exec a process reads empty for a moment (the kernel fills the new stack after
    publishing it); a zombie or kernel thread for good. /proc/<pid>/stat: 0 state, 6 flags.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
        if data:
            return data.startswith(needle) or (b"\0" + needle) in data
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):  # gone, or another user's process
        return False
    return False if fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_KTHREAD else None


def psutil_descendants(pid: int) -> list[int]:
    """The descendants of ``pid`` by psutil (every process's ``stat``), [] when it is gone:
    the fallback where the kernel keeps no per-thread ``children`` lists."""
    import psutil  # deferred: start-up cost (psutil, 29 modules)

    with contextlib.suppress(psutil.Error):
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    return []


def pids_with(needle: bytes, candidates: Iterable[int]) -> list[int]:
    """The ``candidates`` (never the caller) whose environment holds an entry starting with
    ``needle``."""
    found, unsure = [], [pid for pid in candidates if pid != os.getpid()]
    for attempt in range(_EXEC_RETRIES + 1):
        time.sleep(_EXEC_RETRY_DELAY if attempt else 0)
        answers = [(pid, environ_has(pid, needle)) for pid in unsure]
        found += [pid for pid, has in answers if has]
        unsure = [pid for pid, has in answers if has is None]
        if not unsure:
            break
    return found


def process(pid: int) -> Proc | None:
    """``pid`` with its create time (zombies too), or None when there is no such process."""
    created = create_time(pid)
    return None if created is None else Proc(pid, created)


def same(proc: Identified) -> bool:
    """Whether ``proc``'s pid still names it (alive or a zombie, same create time)."""
    created = create_time(proc.pid)
    return created is not None and \
        abs(created - proc.create_time()) <= CREATE_TIME_TOLERANCE


def descendants_of(proc: Identified) -> list[int]:
    """``proc`` and its descendants, [] when its pid names another process (or none)."""
    if not same(proc):
        return []
    found = descendants(proc.pid)
    return [proc.pid, *(found if found is not None else psutil_descendants(proc.pid))]


def pgid(pid: int) -> int | None:
    """The process group of ``pid``, None when there is no such process."""
    with contextlib.suppress(OSError):
        return os.getpgid(pid)
    return None


def group_members(group: int) -> set[int]:
    """The pids whose process group is ``group``."""
    return {pid for pid in pids() if pgid(pid) == group}


def still_held(group: int | None, leader: Identified | None,
               known: Mapping[int, Identified]) -> int | None:
    """``group`` while it still names the process group it did when ``leader`` and
    ``known`` were found, else None: the leader is the same process (alive or a zombie,
    which keeps the pgid taken), or one of ``known`` is the same and still in it (Linux
    never reuses a pgid while a member lives). A stop whose grace outlived a group asks
    before signalling the pgid again (it may name a recycled group by then)."""
    if group is None:
        return None
    if leader is not None and same(leader):
        return group
    for pid, proc in known.items():
        if pgid(pid) == group and same(proc):
            return group
    return None


def is_dead(proc: Identified) -> bool:
    """Gone, a zombie, or its pid recycled (``same_process``)."""
    return not same_process(proc.pid, proc.create_time())


class ExitWatch:
    """A pidfd per process of ``pids`` (``os.pidfd_open``), to sleep until one exits.

    A pidfd is kept only when ``alive(pid)`` still holds once it is open, so it names
    that very process and never a recycled pid; a process none could be opened for (an
    old kernel, no descriptors left) is simply not watched (``covers`` says so). A
    context manager: leaving it closes the descriptors.
    """

    def __init__(self, pids: list[int], alive: Callable[[int], bool]) -> None:
        self._poll = select.poll()
        self._fds: dict[int, int] = {}
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except (OSError, AttributeError):
                continue
            if not alive(pid):
                os.close(fd)
                continue
            self._poll.register(fd, select.POLLIN)
            self._fds[pid] = fd
        self._ready: set[int] = set()

    def covers(self, count: int) -> bool:
        """Whether ``count`` processes are all watched (then no poll tick is needed)."""
        return len(self._fds) >= count > 0

    def wait(self, seconds: float) -> None:
        """Sleep until a watched process exits or ``seconds`` pass."""
        if not self._fds:
            time.sleep(seconds)
            return
        self._ready = {fd for fd, _ in self._poll.poll(max(1, math.ceil(seconds * 1000)))}

    def keep(self, living: Container[int]) -> None:
        """Stop watching every pid not in ``living``, and any reported exited that is not
        (never expected: it is then re-checked on ticks instead of waking the poll)."""
        for pid in [p for p, fd in self._fds.items() if p not in living or fd in self._ready]:
            self._poll.unregister(self._fds[pid])
            os.close(self._fds.pop(pid))

    def __enter__(self) -> ExitWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
