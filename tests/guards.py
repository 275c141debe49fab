"""Per-test guards: what a test leaves running, and where it may connect.

``LeakGuard`` snapshots a test's start and, after its teardown, names every leftover of
the test that is still alive:

- a process created during the test that descends from the pytest process, or that
  carries the test's marks (this session's private ``HOME`` in its environment, or the
  test's ``tmp_path`` in its environment, command line or working directory: daemons such
  as the tmux server and a node's supervisor are re-parented away from pytest);
- a non-daemon thread started during the test;
- a tmux server listening on one of this session's private sockets that had no server
  when the test began.

Leftovers get ``GRACE`` seconds (times ``FRACTAL_TEST_TIMEOUT_SCALE``) to go away on
their own, since a killed tmux session's supervisor takes a moment to finish. What is
still there then fails the test, and the guard kills the leaked processes and servers so
the next test starts clean. The check costs nothing for a test that starts no process:
``count_spawns`` counts every ``subprocess`` launch and ``fork`` of this process, and the
process table is read only when that count moved, and then only the processes created
during the test.

``loopback_only`` refuses ``connect`` to anything but 127.0.0.0/8, ::1 and Unix sockets.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.helpers import SCALE

GRACE = 10.0
"""Seconds a leftover of a test gets to exit before the test fails (times SCALE)."""

_PROC_TICK = 0.011
"""Slack for /proc start times, which are truncated to clock ticks (10 ms)."""


_PID_RANGE_WINDOW = 5.0
"""Seconds after ``begin`` during which the pids handed out since then are told apart by
range (``LeakGuard._candidate_pids``); a longer test looks at every process."""


_SPAWNS = [0]
"""Processes this interpreter has started (``subprocess`` launches and forks)."""

EXEMPT_PIDS: set[int] = set()
"""Processes a test may start and leave running for the session (the CLI fork server)."""

EXEMPT_TREES: set[int] = set()
"""Processes a module's fixture starts and leaves running across its tests together with
every process they start later (a headless browser's renderers, ``tests/browser.py``)."""

CLI_SPAWNS = [0]
"""Of those, launches of the ``fractal`` CLI (``python -m fractal ...``, ``fractal ...``)."""


def _is_cli(argv: Any) -> bool:
    words = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    module = words[1:3] == ["-m", "fractal"] or words[1:4] == ["-P", "-m", "fractal"]
    return module or (bool(words) and words[0].endswith("/fractal"))


def _count_spawn() -> None:
    _SPAWNS[0] += 1


def count_spawns() -> None:
    """Start counting this process's launches (idempotent; call once per session)."""
    if getattr(subprocess.Popen, "_fractal_counted", False):
        return
    real = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def _execute_child(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        _count_spawn()
        if args and _is_cli(args[0]):
            CLI_SPAWNS[0] += 1
        real(self, *args, **kwargs)

    subprocess.Popen._execute_child = _execute_child  # type: ignore[attr-defined]
    subprocess.Popen._fractal_counted = True  # type: ignore[attr-defined]
    os.register_at_fork(before=_count_spawn)


_BOOT: list[float] = []


def _now_in_proc_frame() -> float:
    """Now, in the frame of psutil's ``create_time`` (boot time plus time since boot)."""
    if not _BOOT:
        _BOOT.append(psutil.boot_time())
    return _BOOT[0] + time.clock_gettime(time.CLOCK_BOOTTIME)


def _last_pid() -> int:
    """The last pid the kernel handed out in this pid namespace (-1 when unknown)."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[4].split("/")[0])
    except (OSError, IndexError, ValueError):
        return -1


def tmux_servers(socket_dirs: Iterable[Path]) -> set[Path]:
    """The tmux sockets under ``socket_dirs`` (``<dir>/tmux-<uid>/<name>``) with a live server."""
    live: set[Path] = set()
    for base in socket_dirs:
        for sock in base.glob("tmux-*/*"):
            if not sock.is_socket():
                continue
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.settimeout(1.0)
                probe.connect(str(sock))
            except OSError:
                continue
            finally:
                probe.close()
            live.add(sock)
    return live


@dataclass
class Leftovers:
    """What a test left alive; empty when it cleaned up."""

    processes: list[psutil.Process] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    servers: list[Path] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.threads or self.servers)

    def describe(self) -> str:
        """One line per leftover: what it is and how to recognise it."""
        lines = [f"tmux server still running on {sock} (a session the test started is "
                 "still alive: kill it in the test's teardown)" for sock in self.servers]
        lines += [f"process {_describe(proc)}" for proc in self.processes]
        lines += [f"non-daemon thread {t.name!r} (target {_target(t)}) still running"
                  for t in self.threads]
        return "\n  ".join(["the test left these behind:", *lines])


def _describe(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        words = " ".join(proc.cmdline())[:200] or proc.name()
        return f"{proc.pid} ({proc.name()}, parent {proc.ppid()}): {words}"
    return f"{proc.pid} (gone while being described)"


def _target(thread: threading.Thread) -> str:
    target: Callable[..., Any] | None = getattr(thread, "_target", None)
    if target is None:
        return type(thread).__qualname__
    return getattr(target, "__qualname__", repr(target))


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class LeakGuard:
    """One test's snapshot; ``check`` returns what it left behind."""

    home: str
    socket_dirs: tuple[Path, ...]
    marks: tuple[str, ...] = ()
    started: float = field(default_factory=_now_in_proc_frame)
    last_pid: int = field(default_factory=_last_pid)
    spawns: int = field(default_factory=lambda: _SPAWNS[0])
    threads: frozenset[threading.Thread] = field(
        default_factory=lambda: frozenset(threading.enumerate()))
    servers: frozenset[Path] = frozenset()

    @classmethod
    def begin(cls, home: str, socket_dirs: tuple[Path, ...], marks: tuple[str, ...] = ()
              ) -> LeakGuard:
        return cls(home=home, socket_dirs=socket_dirs, marks=marks,
                   servers=frozenset(tmux_servers(socket_dirs)))

    # -- what the test started ----------------------------------------------------------

    def _new_processes(self) -> list[psutil.Process]:
        """Processes created since ``begin`` that belong to this test (alive, not zombies)."""
        if _SPAWNS[0] == self.spawns:
            return []  # nothing here started a process since the test began
        if self.last_pid != -1 and _last_pid() == self.last_pid:
            return []  # the kernel handed out no pid since the test began
        me = os.getpid()
        parents: dict[int, int] = {}
        fresh: list[psutil.Process] = []
        for pid in self._candidate_pids():
            try:
                proc = psutil.Process(pid)
                with proc.oneshot():
                    created = proc.create_time()
                    parents[pid] = proc.ppid()
            except psutil.Error:
                continue
            if pid != me and created >= self.started - _PROC_TICK:
                fresh.append(proc)
        return [proc for proc in fresh if proc.pid not in EXEMPT_PIDS
                and not any(proc.pid == root or _descends(proc.pid, root, parents)
                            for root in EXEMPT_TREES)
                and _alive(proc) and (_descends(proc.pid, me, parents) or self._marked(proc))]

    def _candidate_pids(self) -> list[int]:
        """The live pids that can have been handed out since ``begin``.

        The kernel hands out pids in increasing order from the last one, wrapping once it
        reaches ``pid_max``: a process created since then has a pid above the last pid
        seen at ``begin``, or (after a wrap) at most the last pid handed out now. Reading
        only those spares a look at every process on the machine; past
        ``_PID_RANGE_WINDOW`` seconds (when a second wrap is conceivable) every pid is a
        candidate.
        """
        pids = psutil.pids()
        now = _last_pid()
        if (self.last_pid == -1 or now == -1
                or _now_in_proc_frame() - self.started > _PID_RANGE_WINDOW):
            return pids
        if now >= self.last_pid:
            return [pid for pid in pids if pid > self.last_pid]
        return [pid for pid in pids if pid > self.last_pid or pid <= now]

    def _marked(self, proc: psutil.Process) -> bool:
        """Does ``proc`` carry this session's HOME or the test's tmp path?"""
        try:
            environ = proc.environ()
            if environ.get("HOME") == self.home:
                return True
            if not self.marks:
                return False
            texts = [*environ.values(), *proc.cmdline()]
            with contextlib.suppress(psutil.Error):
                texts.append(proc.cwd())
        except psutil.Error:
            return False
        return any(mark in text for mark in self.marks for text in texts)

    def _new_threads(self) -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t not in self.threads and not t.daemon and t.is_alive()]

    def _new_servers(self) -> list[Path]:
        if _SPAWNS[0] == self.spawns:
            return []  # a tmux server is only ever started by a process of ours
        return sorted(tmux_servers(self.socket_dirs) - self.servers)

    # -- the check ----------------------------------------------------------------------

    def check(self, grace: float = GRACE * SCALE) -> Leftovers:
        """Leftovers still alive after up to ``grace`` seconds (empty: the test was clean)."""
        deadline = time.monotonic() + grace
        while True:
            left = Leftovers(self._new_processes(), self._new_threads(), self._new_servers())
            if not left or time.monotonic() >= deadline:
                return left
            for thread in left.threads:
                thread.join(timeout=0.05)
            time.sleep(0.05)

    @staticmethod
    def clean(left: Leftovers) -> None:
        """Kill the leaked tmux servers and processes so the next test starts clean."""
        for sock in left.servers:
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True,
                           check=False, timeout=10)
        for proc in left.processes:
            with contextlib.suppress(psutil.Error, OSError):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(left.processes, timeout=5)


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    """Is ``ancestor`` on ``pid``'s parent chain? ``parents`` caches known parent pids; a
    pid it lacks (an older process) is looked up and added."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        if pid not in parents:
            try:
                parents[pid] = psutil.Process(pid).ppid()
            except psutil.Error:
                parents[pid] = 0
        pid = parents[pid]
        if pid == ancestor:
            return True
    return False


# -- the network ----------------------------------------------------------------------------

class NetworkBlocked(OSError):
    """A test tried to reach an address outside loopback."""


def _loopback(family: int, address: object) -> bool:
    if family == getattr(socket, "AF_UNIX", None):
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = str(address[0])
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a host name: the test must name a loopback address itself
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def loopback_only(real_connect: Callable[[socket.socket, Any], Any]
                  ) -> Callable[[socket.socket, Any], Any]:
    """Wrap ``socket.connect`` (or ``connect_ex``) to refuse non-loopback addresses."""

    def connect(sock: socket.socket, address: Any) -> Any:
        if not _loopback(sock.family, address):
            raise NetworkBlocked(
                f"test tried to connect to {address!r}: tests reach only 127.0.0.0/8, ::1 "
                "and Unix sockets (mark the test `agents` if it truly needs the network)")
        return real_connect(sock, address)

    return connect
