"""In-process doubles for the loop's two seams, and a tree harness that runs a real
supervisor with them: a fake clock, a scripted launcher, a real SQLite ledger, a real git
repository, the real CLI (through click's runner, in this process).

``FakeClock`` never sleeps: a wait advances its time to the timeout (or to the first timer
due before it), so an hour of walls, backoffs and approval waits takes milliseconds.
``ScriptedLauncher`` plays each agent attempt from the ``[stub:...]`` markers in its prompt
(the vocabulary of ``tests/stubs/agent_stub.py``, so a step file says what its agent does,
plus ``[stub:fail-first=N]``: fail the first N attempts of the step, ``[stub:limit-first=N]``:
stop the first N on a closed usage window (``[stub:limit-unstated-first=N]``: one whose
reset is not stated), ``[stub:usage-warn=F]``: report the window
``F`` used, ``[stub:outage-first=N[:STATUS]]``: fail the first N with an API error of
HTTP STATUS, 529 by default; any marker prefixed ``wait-sync-`` acts only in a waiting
loop's SYNC, ``[stub:wait-sync-fail-first=1]``) and records every call. The fakes record; they never assert that they were called.
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import io
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fractal.agents.base import AgentEvent, StreamParser
from fractal.runtime.boot import RunOptions
from fractal.runtime.launcher import Spawn
from fractal.runtime.pane import PaneReporter
from fractal.runtime.supervisor import Supervisor
from tests.helpers import TreeLayout, git, make_repo

STUB = Path(__file__).resolve().parent / "stubs" / "agent_stub.py"
LIMIT_RESET = 120.0  # fake seconds until a window closed by [stub:limit-first=N] reopens
FAKE_LIMIT = 10 * 24 * 3600.0  # fake seconds a test may run before it is declared stuck


class FakeClockLimit(RuntimeError):
    """The fake clock ran past FAKE_LIMIT: the run under test never ends."""


class FakeClock:
    """A clock whose time moves only when the loop waits (see the module docstring).

    ``monotonic()`` starts at 1000.0; ``time()`` is the real epoch at construction plus the
    fake seconds elapsed (ledger rows keep real timestamps). ``after(delay, action)`` runs
    ``action`` once the fake time reaches now + ``delay``. ``waited`` records every wait.
    """

    def __init__(self) -> None:
        self.now = 1000.0
        self.epoch0 = time.time()
        self.waited: list[float] = []
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch0 + (self.now - 1000.0)

    def elapsed(self) -> float:
        """Fake seconds since construction."""
        return self.now - 1000.0

    def after(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self.now + delay, next(self._order), action))

    def wait(self, event: threading.Event, timeout: float) -> bool:
        self.waited.append(timeout)
        if event.is_set():
            return True
        target = self.now + max(0.0, timeout)
        while self._timers and self._timers[0][0] <= target:
            at, _n, action = heapq.heappop(self._timers)
            self.now = max(self.now, at)
            action()
            if event.is_set():
                return True
        self.now = target
        if self.elapsed() > FAKE_LIMIT:
            raise FakeClockLimit(f"the fake clock passed {FAKE_LIMIT:.0f}s")
        return event.is_set()


_MARKER = re.compile(r"\[stub:([a-z0-9-]+)(?:=([^\]]*))?\]")


@dataclass
class FakeCall:
    """One attempt the launcher played: what the loop asked, and how it ended."""

    step_id: int
    prompt: str
    env: dict[str, str]
    argv: list[str]
    cwd: Path
    started_at: float  # fake monotonic seconds
    ended_at: float | None = None
    returncode: int | None = None
    stopped: bool = False  # the loop ended its group (a limit, a pause, a linger)

    @property
    def label(self) -> str:
        return self.env.get("STEP_LABEL", "")

    @property
    def is_sync(self) -> bool:
        return self.label.startswith("SYNC")


class FakeAgent:
    """One scripted attempt: it runs the markers of its prompt in order; ``sleep`` and
    ``sync-sleep`` wait on the fake clock, ``wait-file``/``hang-unless`` until a path
    exists, ``hang`` and ``result-then-hang`` until the loop stops it."""

    def __init__(self, launcher: ScriptedLauncher, spawn: Spawn, call: FakeCall) -> None:
        self.launcher = launcher
        self.spawn = spawn
        self.call = call
        self.pgid = 10_000 + spawn.step_id
        self.create_time = launcher.clock.time()
        self.todo = [(m.group(1), m.group(2) or "") for m in _MARKER.finditer(call.prompt)]
        self.ignores_term = any(k == "ignore-term" for k, _ in self.todo)
        self._pos = 0
        self._blocked_on: Path | None = None
        self._parser: StreamParser | None = None
        self._sink: Callable[[AgentEvent], None] | None = None
        self._on_exit: Callable[[], None] | None = None

    # -- the AgentRun protocol ------------------------------------------------------------

    def start(self, parser: StreamParser, sink: Callable[[AgentEvent], None],
              on_exit: Callable[[], None]) -> None:
        self._parser, self._sink, self._on_exit = parser, sink, on_exit
        if not any(k == "no-session" for k, _ in self.todo):
            session = self.call.env.get("FRACTAL_SESSION_ID") or \
                f"stub-{next(self.launcher.sessions):08x}"
            self._emit({"type": "session", "id": session})
        self._line(f"stub agent: {self.call.label or '?'}")
        self._advance()

    def exited(self) -> bool:
        if self._blocked_on is not None and self._blocked_on.exists():
            self._blocked_on = None
            self._advance()
        return self.call.returncode is not None

    def returncode(self) -> int | None:
        return self.call.returncode

    def stop(self, *, grace: float, soft_signal: int | None = None,
             soft_grace: float = 0.0) -> None:
        if self.call.returncode is None:
            self.call.stopped = True
            self._exit(-9 if self.ignores_term else -15)

    def settle(self) -> str | None:
        assert self._parser is not None and self._sink is not None
        for event in self._parser.finish():
            self._sink(event)
        return None

    # -- the script -----------------------------------------------------------------------

    def _line(self, text: str) -> None:
        assert self._parser is not None and self._sink is not None
        for event in self._parser.feed(text):
            self._sink(event)

    def _emit(self, data: Mapping[str, object]) -> None:
        self._line(json.dumps(data))

    def _stderr(self, text: str) -> None:
        with self.spawn.err_path.open("a", encoding="utf-8") as fh:
            fh.write(text + "\n")

    def _exit(self, code: int) -> None:
        if self.call.returncode is not None:
            return
        self.call.returncode = code
        self.call.ended_at = self.launcher.clock.monotonic()
        assert self._on_exit is not None
        self._on_exit()

    def _resume_after(self, seconds: float) -> None:
        def go() -> None:
            if self.call.returncode is None:
                self._advance()
        self.launcher.clock.after(seconds, go)

    def _advance(self) -> None:
        """Run markers until one blocks or the script ends (exit 0)."""
        sync = self.call.is_sync
        while self._pos < len(self.todo):
            key, value = self.todo[self._pos]
            self._pos += 1
            if key.startswith("wait-sync-"):  # a waiting loop's SYNC only
                if not self.call.label.startswith("SYNC while"):
                    continue
                key = key.removeprefix("wait-sync-")
            if key in ("write", "append"):
                path, _, text = value.partition(":")
                target = self.call.cwd / path
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("a" if key == "append" else "w") as fh:
                    fh.write(text + "\n")
            elif key == "cost":
                self._emit({"type": "cost", "usd": float(value)})
            elif key == "model":
                self._emit({"type": "model", "id": value})
            elif key == "sleep" or (key == "sync-sleep" and sync):
                self._resume_after(float(value))
                return
            elif key in ("wait-file", "hang-unless"):
                self._blocked_on = Path(value)
                if not self._blocked_on.exists():
                    return
                self._blocked_on = None
            elif key == "result-then-hang":
                self._emit({"type": "cost", "usd": 0.25})
                return
            elif key == "hang":
                return
            elif key == "limit-first" and self.launcher.attempts(self.call) <= int(value):
                # a closed usage window, reopening LIMIT_RESET fake seconds from now
                self._emit({"type": "usage_limit", "window": "five_hour",
                            "resets_at": self.launcher.clock.time() + LIMIT_RESET})
                self._exit(1)
                return
            elif key == "limit-unstated-first" and \
                    self.launcher.attempts(self.call) <= int(value):
                # a closed usage window whose reset the CLI did not state
                self._emit({"type": "usage_limit", "window": "five_hour"})
            elif key == "outage-first" and \
                    self.launcher.attempts(self.call) <= int(value.partition(":")[0]):
                # the provider is down: the API answers with an error (529 unless given)
                status = int(value.partition(":")[2] or 529)
                self._emit({"type": "api_error", "status": status,
                            "message": f"scripted HTTP {status}"})
                self._exit(1)
                return
            elif key == "usage-warn":
                self._emit({"type": "usage", "utilization": float(value), "window": "five_hour",
                            "resets_at": self.launcher.clock.time() + LIMIT_RESET})
            elif key == "fail-first" and self.launcher.attempts(self.call) <= int(value):
                self._stderr(f"stub agent failing attempt {self.launcher.attempts(self.call)}")
                self._exit(1)
                return
            elif key == "fail" or (key == "sync-fail" and sync):
                self._stderr(f"stub agent failing with exit {value}")
                self._exit(int(value))
                return
        self._exit(0)


@dataclass
class ScriptedLauncher:
    """Plays each attempt from its prompt's markers (``FakeAgent``) and records it in
    ``calls``. ``on_spawn`` actions run right after an attempt starts (a test's way to
    act "while step A runs"); ``refuse`` makes the next spawns fail as exec would."""

    clock: FakeClock
    calls: list[FakeCall] = field(default_factory=list)
    on_spawn: list[Callable[[FakeCall], None]] = field(default_factory=list)
    refuse: str | None = None
    sessions: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def spawn(self, spawn: Spawn, *, grace: float) -> FakeAgent:
        if self.refuse is not None:
            raise OSError(self.refuse)
        stdin = spawn.invocation.stdin
        prompt = stdin.decode("utf-8") if stdin is not None else spawn.request.prompt
        spawn.err_path.parent.mkdir(parents=True, exist_ok=True)
        spawn.err_path.write_text("")
        call = FakeCall(step_id=spawn.step_id, prompt=prompt, env=dict(spawn.env),
                        argv=list(spawn.invocation.argv), cwd=spawn.request.worktree,
                        started_at=self.clock.monotonic())
        self.calls.append(call)
        agent = FakeAgent(self, spawn, call)
        for action in list(self.on_spawn):
            action(call)
        return agent

    def attempts(self, call: FakeCall) -> int:
        """How many attempts of ``call``'s step (its STEP_LABEL) were played so far."""
        return sum(1 for c in self.calls if c.label == call.label)

    def work_calls(self) -> list[FakeCall]:
        """The calls that were not SYNC pseudo-steps."""
        return [c for c in self.calls if not c.is_sync]


# -- the tree harness ----------------------------------------------------------------------

_TEMPLATES: dict[bool, Path] = {}


def _template(real: bool) -> Path:
    """A repository with a tree rooted at ``main`` (``fractal init --agent``), made once per
    test process and copied for each test: creating the database costs more than a run."""
    if real not in _TEMPLATES:
        from fractal.store.engine import close_engines

        base = Path(tempfile.mkdtemp(prefix="fx-loop-"))
        atexit.register(shutil.rmtree, base, True)
        make_repo(base / "repo")
        bindir = base / "bin"
        bindir.mkdir()
        agent = bindir / "fake-agent"
        agent.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{STUB}' \"$@\"\n"
                         if real else "#!/bin/sh\nexit 0\n")
        agent.chmod(0o755)
        _cli(base / "repo", "init", "--agent", str(agent))
        close_engines()
        _TEMPLATES[real] = base
    return _TEMPLATES[real]


def _cli(cwd: Path, *args: str) -> Result:
    """``fractal ARGS`` in this process from ``cwd``."""
    from fractal.cli import cli

    saved = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, list(args), catch_exceptions=True)
    finally:
        os.chdir(saved)


class LoopTree(TreeLayout):
    """A tree rooted at ``main`` in ``repo`` whose nodes run in this process.

    ``cli`` runs the real CLI in-process; ``node`` creates a node and replaces its steps;
    ``run`` runs one supervisor to its end (or park) with the fake clock and the scripted
    launcher and returns its exit code.
    """

    def __init__(self, tmp_path: Path, *, real: bool = False) -> None:
        template = _template(real)
        self.repo = tmp_path / "repo"
        shutil.copytree(template / "repo", self.repo, symlinks=True)
        #: The tree's agent: a real stub behind a wrapper when ``real``, else a script the
        #: scripted launcher never executes (it exists for the preflight).
        self.agent = template / "bin" / "fake-agent"
        self.clock = FakeClock()
        self.launcher = ScriptedLauncher(self.clock)
        #: ``real``: the system clock and real agent processes (``tests/stubs/agent_stub.py``
        #: behind ``agent``), for what only a real process shows.
        self.real = real
        self.panes: list[PaneReporter] = []

    # -- the CLI ------------------------------------------------------------------------

    def cli(self, *args: str, check: bool = True, cwd: Path | None = None) -> Result:
        """``fractal ARGS`` in this process, from ``cwd`` (the repository by default). A
        refusal (``FractalError``) comes back as exit 1 with its message in ``output``."""
        from fractal.domain.errors import FractalError

        result = _cli(cwd or self.repo, *args)
        if isinstance(result.exception, FractalError):
            result.exit_code = 1
            result.output_bytes += f"Error: {result.exception}\n".encode()
        elif result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        if check and result.exit_code != 0:
            raise AssertionError(f"fractal {' '.join(args)} exited {result.exit_code}\n"
                                 f"{result.output}")
        return result

    # -- nodes --------------------------------------------------------------------------

    def node(self, name: str, steps: Mapping[str, str] | None = None, *opts: str,
             node_md: str = "# Task\n\nDo the step.\n", setup: bool = False) -> Path:
        """``fractal node init NAME OPTS``, then replace its steps with ``steps``. The
        seeded ``scripts/setup.sh`` (it only exits 0) is removed unless ``setup``: a run
        without one skips setup, which saves a process per iteration."""
        self.cli("node", "init", name, *opts)
        ndir = self.node_dir(name)
        if not setup:
            (ndir / "scripts" / "setup.sh").unlink(missing_ok=True)
        if steps is not None:
            shutil.rmtree(ndir / "steps")
            (ndir / "steps").mkdir()
            for filename, body in steps.items():
                (ndir / "steps" / filename).write_text(body)
        (ndir / "NODE.md").write_text(node_md)
        git(self.worktree(name), "add", "-A")
        git(self.worktree(name), "commit", "-q", "-m", "test setup", "--no-verify")
        return ndir

    def config(self, name: str) -> dict[str, Any]:
        data = json.loads((self.node_dir(name) / "config.json").read_text())
        assert isinstance(data, dict)
        return data

    def set_config(self, name: str, **values: object) -> None:
        path = self.node_dir(name) / "config.json"
        path.write_text(json.dumps({**self.config(name), **values}, indent=2))

    # -- runs ---------------------------------------------------------------------------

    def during(self, label: str, action: Callable[[], None]) -> None:
        """Run ``action`` once, when the first step whose STEP_LABEL contains ``label``
        starts (a SYNC launch aside); what it raises is raised at that spawn."""
        done: list[bool] = []

        def hook(call: FakeCall) -> None:
            if not done and label in call.label and not call.is_sync:
                done.append(True)
                action()
        self.launcher.on_spawn.append(hook)

    def run(self, name: str, *, resume: bool = False, parked_for: float = 0.0) -> int:
        """Run node ``name``'s supervisor in this process until the run ends or parks.
        ``resume`` records the operator's resume (as ``fractal node resume`` does before
        it relaunches the loop) and adopts the parked run; ``parked_for`` seconds pass on
        the clock first, and the resume row is dated that much after the park."""
        from datetime import UTC, datetime

        from fractal.store.ledger import Ledger
        from fractal.store.timefmt import format_ts, to_epoch
        from fractal.tree import find_tree

        tree = find_tree(self.repo)
        paths = tree.node(f"main.{name}")
        if resume:
            ledger = Ledger(tree.db_path)
            run = ledger.open_run_of(paths.branch)
            assert run is not None, f"main.{name} has no parked run"
            ledger.add_event(paths.branch, "resume", actor="operator", status="completed",
                             run_id=run.run_id)
            if parked_for:
                self.clock.now += parked_for
                ((parked,),) = self.sql("SELECT created_at FROM events WHERE node = ? AND "
                                        "event = 'pause' ORDER BY event_id DESC LIMIT 1",
                                        paths.branch)
                at = datetime.fromtimestamp(to_epoch(str(parked)) + parked_for, UTC)
                self.sql_write("UPDATE events SET created_at = ? WHERE event_id = (SELECT "
                               "MAX(event_id) FROM events WHERE node = ? AND event = "
                               "'resume')", format_ts(at), paths.branch)
        pane = PaneReporter(stream=io.StringIO())
        self.panes.append(pane)
        if self.real:
            supervisor = Supervisor(paths, RunOptions(resume_mode=resume), pane)
        else:
            supervisor = Supervisor(paths, RunOptions(resume_mode=resume), pane,
                                    clock=self.clock, launcher=self.launcher)
        return supervisor.run(own_process=False)

    def pane(self) -> str:
        """What the last run showed in its pane."""
        stream = self.panes[-1].stream
        assert isinstance(stream, io.StringIO)
        return stream.getvalue()

    # -- reads --------------------------------------------------------------------------

    def sql(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        import sqlite3

        con = sqlite3.connect(self.db)
        try:
            return list(con.execute(query, params))
        finally:
            con.close()

    def sql_write(self, query: str, *params: object) -> None:
        import sqlite3

        con = sqlite3.connect(self.db)
        try:
            with con:
                con.execute(query, params)
        finally:
            con.close()

    def status(self, name: str) -> str:
        rows = self.sql("SELECT status FROM nodes WHERE node = ?", f"main.{name}")
        return str(rows[0][0]) if rows else "missing"

    def run_row(self, name: str) -> tuple[Any, ...]:
        """(status, exit_code, metadata) of the node's newest run."""
        return self.sql("SELECT status, exit_code, metadata FROM runs WHERE node = ? "
                        "ORDER BY run_id DESC LIMIT 1", f"main.{name}")[0]

    def steps(self, name: str) -> list[tuple[Any, ...]]:
        """(step_name, status, exit_code, metadata) of every step row, in order."""
        return self.sql("SELECT step_name, status, exit_code, metadata FROM steps "
                        "WHERE node = ? ORDER BY step_id", f"main.{name}")

    def iterations(self, name: str) -> list[tuple[Any, ...]]:
        """(iter, status, exit_code, metadata) of every iteration row, in order."""
        return self.sql("SELECT iter, status, exit_code, metadata FROM iterations "
                        "WHERE node = ? ORDER BY iter_id", f"main.{name}")


@contextlib.contextmanager
def _no_boot_wait() -> Iterator[None]:
    """The signal verbs wait (in real seconds, ``steer.BOOT_WAIT``) while a node is active
    with no open run yet, its supervisor booting. In this harness no supervisor boots
    while a verb runs (a run is a call in this thread), so such a node is a test's setup
    (a child set active to be waited on) and the wait could only run out: the verbs read
    the node as it is at once, as they would after that wait."""
    from fractal.lifecycle.steering import signal as steer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steer, "BOOT_WAIT", 0.0)
        yield


@pytest.fixture
def loop_tree(tmp_path: Path) -> Iterator[LoopTree]:
    """A fresh in-process tree (see LoopTree); the process environment is restored."""
    saved = dict(os.environ)
    try:
        with _no_boot_wait():
            yield LoopTree(tmp_path)
    finally:
        from fractal.store.engine import close_engines

        close_engines()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def real_loop_tree(tmp_path: Path) -> Iterator[LoopTree]:
    """An in-process tree whose agents are real stub processes under the system clock
    (a 1 s kill grace); the process environment is restored."""
    saved = dict(os.environ)
    os.environ["FRACTAL_KILL_GRACE"] = "1"
    try:
        with _no_boot_wait():
            yield LoopTree(tmp_path, real=True)
    finally:
        from fractal.store.engine import close_engines

        close_engines()
        os.environ.clear()
        os.environ.update(saved)
