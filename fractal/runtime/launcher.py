"""The loop's launcher: what starts one agent attempt and hands back its stream and exit.

``launch.run_attempt`` owns the attempt's rules (the step row, the time limit, the
final-event grace, a pause, how the end is recorded); a ``Launcher`` owns only the
process. ``ProcessLauncher`` is the real one: the agent runs as its own process group
(``processes.spawn_group``), its stdout is pumped through the backend's parser on a
thread, a waiter thread notices its exit, and a stop is ``processes.kill_group``. A test
builds the loop with a scripted launcher instead, so a run needs no process at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fractal.agents.base import AgentEvent, Invocation, LaunchRequest, StreamParser
from fractal.procs import processes
from fractal.runtime import sandboxing
from fractal.runtime.agentstream import StreamPump
from fractal.runtime.clock import trace

__all__ = ["AgentRun", "Launcher", "ProcessLauncher", "Spawn"]

log = logging.getLogger(__name__)

EXIT_STATUS_WAIT = 2.0  # seconds to let the waiter collect an ended group's exit status


@dataclass(frozen=True)
class Spawn:
    """One agent process to start: the command line (``invocation``), the request it
    serves, its full environment, where its stderr goes, and its launch marker (an
    environment entry every descendant inherits, so escapees are found)."""

    step_id: int
    request: LaunchRequest
    invocation: Invocation
    env: Mapping[str, str]
    err_path: Path
    marker: str


class AgentRun(Protocol):
    """A started attempt. ``pgid``/``create_time`` identify its process group (epoch s)."""

    pgid: int
    create_time: float

    def start(self, parser: StreamParser, sink: Callable[[AgentEvent], None],
              on_exit: Callable[[], None]) -> None:
        """Begin feeding stdout lines through ``parser`` into ``sink``; call ``on_exit``
        (from any thread) once the agent has exited."""
        ...

    def exited(self) -> bool:
        """True once the agent's leader has exited."""
        ...

    def returncode(self) -> int | None:
        """``Popen.returncode`` semantics: None while running, -N for death by signal N."""
        ...

    def stop(self, *, grace: float, soft_signal: int | None = None,
             soft_grace: float = 0.0) -> None:
        """End the whole group: ``soft_signal`` first (``soft_grace`` s), then TERM,
        ``grace`` s, KILL."""
        ...

    def settle(self) -> str | None:
        """After the end: collect the exit status, finish the stream, reap every leftover.
        Returns the stream's error (a parser that raised, a broken pipe), or None."""
        ...


class Launcher(Protocol):
    """Starts agent attempts. ``spawn`` raises SpawnError, OSError or ValueError when the
    program cannot start."""

    def spawn(self, spawn: Spawn, *, grace: float) -> AgentRun:
        """Start ``spawn``; ``grace`` is the kill grace used when it must be reaped."""
        ...


class ProcessAgent:
    """A real agent process group (see the module docstring)."""

    def __init__(self, launched: processes.Launched, spawn: Spawn, grace: float) -> None:
        self.launched = launched
        self.spawn = spawn
        self.grace = grace
        self.pgid = launched.handle.pgid
        self.create_time = launched.handle.create_time
        self._exited = threading.Event()
        self._pump: StreamPump | None = None

    def start(self, parser: StreamParser, sink: Callable[[AgentEvent], None],
              on_exit: Callable[[], None]) -> None:
        """Start the stream pump and the exit waiter threads."""
        stdout = self.launched.popen.stdout
        assert stdout is not None
        self._pump = StreamPump(stdout, parser, sink)
        self._pump.start()

        def wait_exit() -> None:
            self.launched.popen.wait()
            trace("exit", self.spawn.step_id)
            self._exited.set()
            on_exit()

        threading.Thread(target=wait_exit, daemon=True, name="fractal-wait").start()

    def exited(self) -> bool:
        """True once the waiter saw the leader exit."""
        return self._exited.is_set()

    def returncode(self) -> int | None:
        """The leader's ``Popen.returncode``."""
        return self.launched.popen.returncode

    def stop(self, *, grace: float, soft_signal: int | None = None,
             soft_grace: float = 0.0) -> None:
        """``processes.kill_group`` on the attempt's group."""
        processes.kill_group(self.launched.handle, grace=grace, soft_signal=soft_signal,
                             soft_grace=soft_grace)

    def settle(self) -> str | None:
        """Let the waiter collect the exit status, let the pump finish, then reap every
        process carrying the launch marker and every leftover descendant."""
        self._exited.wait(EXIT_STATUS_WAIT)
        pump = self._pump
        if pump is not None:
            pump.join(2.0)
            if pump.is_alive():  # an escaped descendant holds stdout open
                processes.sweep_marker(self.spawn.marker, grace=self.grace)
                pump.join(5.0)
        survivors = processes.sweep_marker(self.spawn.marker, grace=self.grace)
        # An escapee that dropped the marker (`env -i`) is still our descendant: the
        # supervisor is a subreaper and starts nothing else while no step runs.
        survivors += processes.sweep_descendants(grace=self.grace)
        if survivors:
            log.error("processes survived the sweep of step %s: %s", self.spawn.step_id,
                      survivors)
        sandboxing.after_launch()
        return pump.stream_error if pump is not None else None


class ProcessLauncher:
    """Spawns each attempt as a real process group (``processes.spawn_group``)."""

    def spawn(self, spawn: Spawn, *, grace: float) -> ProcessAgent:
        """Start the agent; its stderr goes to ``spawn.err_path`` (its directory made)."""
        spawn.err_path.parent.mkdir(parents=True, exist_ok=True)
        launched = processes.spawn_group(
            sandboxing.confine(spawn.invocation.argv, spawn.request.worktree),
            cwd=spawn.request.worktree, env=sandboxing.launch_env(spawn.env),
            stdin_data=spawn.invocation.stdin, stderr_path=spawn.err_path, marker=spawn.marker)
        trace("spawn", spawn.step_id)
        return ProcessAgent(launched, spawn, grace)
