"""Hermetic test environment and per-test guards.

Every test session gets its own HOME, XDG dirs and ``TMUX_TMPDIR`` (so a private tmux
server), and loses any inherited ``TMUX``, ``FRACTAL_*`` and loop variables, so a suite
run inside a live node can never touch that node's database or tmux server. At the end
of the session the private tmux server is killed.

Every test also runs under three guards (``tests/guards.py``): it fails when it leaves a
process, a non-daemon thread or a tmux server behind; it may connect only to loopback
and Unix sockets (tests marked ``agents`` are exempt: they install from npm); and the
process's cached database engines are disposed after it.

A database this process creates from nothing is a copy of one migrated to head once per
session (``_schema_from_template``) instead of a fresh Alembic run; an existing file is
still migrated for real, and a module that tests migrations themselves sets
``REAL_MIGRATIONS = True``. Subprocesses (the CLI) always migrate for real.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fractal.store import schema
from tests.guards import LeakGuard, count_spawns, loopback_only
from tests.helpers import TEMPLATES_ENV, make_repo

# tests.timing: FRACTAL_TEST_TIMING=<file> records per-test wall and CPU seconds;
# tests.ordering: runs the longest tests first (tests/durations.json).
pytest_plugins = ["tests.timing", "tests.ordering", "tests.pgbackend"]

PRICES_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pricing" / "prices.json"
"""A small price table in LiteLLM's public format (gpt-fixture, openrouter/anthropic/...)."""

_LOOP_VARS = (
    "TMUX", "TMUX_PANE", "_NODE", "RUN_ID", "ITER", "ITER_ID", "STEP_ID", "ITER_REF", "NODE_BRANCH",
    "NODE_DIR", "WORKTREE_DIR", "STEP_LABEL", "ITER_LABEL", "AGENT_COMMAND",
)


def _strip_env() -> None:
    for key in list(os.environ):
        if key.startswith("FRACTAL_") and key != "FRACTAL_TEST_TIMEOUT_SCALE":
            del os.environ[key]
    for key in _LOOP_VARS:
        os.environ.pop(key, None)


SCRATCH_ENV = "FRACTAL_TEST_TMPDIR"
"""Where the session's temporary files go: a directory, or empty for the system default.
Unset: a private directory in ``/dev/shm`` when that is a tmpfs with room to spare."""
_SCRATCH_ROOM = 4 << 30
"""Bytes ``/dev/shm`` must have free to be chosen (one full run writes ~0.8 GB)."""


def pytest_configure(config: pytest.Config) -> None:
    count_spawns()  # the leak guard reads the process table only after a launch
    _deliverable_sigint()
    if not hasattr(config, "workerinput"):  # xdist workers inherit the controller's
        _move_scratch()


def _move_scratch() -> None:
    """Point ``TMPDIR`` (and so pytest's ``tmp_path`` roots, ``tempfile``, every child
    process) at a memory-backed directory when one is at hand.

    The suite writes about 140,000 files a run (repositories, worktrees, databases, lock
    files) and removes most of them again. On a disk-backed ``/tmp`` (ext4 mounted with
    online discard, here) four integration modules spent 40-50 % more system CPU and
    20-30 % more wall on it than on tmpfs, where the same files cost memory only. The code under test is the same: real git, SQLite and processes, on another
    mount. ``FRACTAL_TEST_TMPDIR=<dir>`` chooses the directory, ``FRACTAL_TEST_TMPDIR=``
    keeps the system default.
    """
    chosen = os.environ.get(SCRATCH_ENV)
    if chosen is None:
        chosen = _shm_scratch() or ""
    if not chosen:
        return
    place = Path(chosen).absolute()  # a child in another cwd must find the same directory
    try:
        place.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"{SCRATCH_ENV}={chosen}: cannot use it as the session's "
                                f"temporary directory ({exc.strerror or exc}); name a "
                                "directory, or set it empty for the system default") from None
    os.environ["TMPDIR"] = os.path.normpath(place)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use


def _shm_scratch() -> str | None:
    """``/dev/shm/fractal-tests-<uid>`` when ``/dev/shm`` is a tmpfs with at least
    ``_SCRATCH_ROOM`` bytes free and the directory is ours (never a symlink or another
    user's); None otherwise."""
    shm = Path("/dev/shm")
    try:
        mounts = Path("/proc/self/mounts").read_text()
        if not any(f.split()[1:3] == [str(shm), "tmpfs"] for f in mounts.splitlines()):
            return None
        room = os.statvfs(shm)
        if room.f_bavail * room.f_frsize < _SCRATCH_ROOM:
            return None
        scratch = shm / f"fractal-tests-{os.getuid()}"
        scratch.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(scratch)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return None
    return str(scratch)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move everything alive after collection (the imported modules, every collected
    test) to the garbage collector's permanent generation.

    A full collection would otherwise walk that whole heap again and again during the
    run, and pytest's own clean-up at the end of a session collects five times in a row
    (about a second of CPU per test process, and the suite starts five: one pass that
    warms the bytecode caches and four workers). Objects made after this are collected
    as before.
    """
    gc.freeze()


def _deliverable_sigint() -> None:
    """Give SIGINT back its default handler when this process inherited it ignored.

    A suite started in the background by a non-interactive shell (``make test &``, a CI
    runner) inherits SIGINT ignored, and an ignored disposition survives ``exec``: every
    stub agent, ``sh`` script and ``fractal`` CLI the tests start would then ignore the
    soft interrupt the tests send them (a trapped ``INT`` never runs, ``--follow`` never
    stops). Python's own handler is reset to the default across ``exec``, as when the
    suite is started from a terminal. Runs in the main process and in each xdist worker.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        with contextlib.suppress(ValueError):  # not the main thread: leave it as it is
            signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def hermetic_session() -> Iterator[Path]:
    """Move HOME, XDG dirs and the tmux socket dir to a private temp tree for the session."""
    saved = dict(os.environ)
    # Short base path: tmux socket paths must fit in sun_path (108 bytes).
    base = Path(tempfile.mkdtemp(prefix="fx-"))
    home = base / "home"
    home.mkdir()
    tmux_dir = base / "t"
    tmux_dir.mkdir(mode=0o700)
    (base / "templates").mkdir()
    _strip_env()
    os.environ.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "TMUX_TMPDIR": str(tmux_dir),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C.UTF-8",
        # The price table comes from a fixture file, never the network.
        "FRACTAL_PRICING_URL": PRICES_FIXTURE.as_uri(),
        TEMPLATES_ENV: str(base / "templates"),  # make_repo's session templates
    })
    try:
        yield base
    finally:
        if shutil.which("tmux"):
            for sock in tmux_dir.rglob("*"):
                if sock.is_socket():
                    subprocess.run(["tmux", "-S", str(sock), "kill-server"],
                                   capture_output=True, check=False)
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh git repository on branch ``main`` with one commit and a local identity."""
    return make_repo(tmp_path / "repo")


@pytest.fixture(autouse=True)
def _leak_guard(request: pytest.FixtureRequest, hermetic_session: Path) -> Iterator[None]:
    """Fail the test if it leaves a process, a non-daemon thread or a tmux server behind.

    Set up before and torn down after every other function-scoped fixture, so a fixture's
    own cleanup (``tree`` killing its tmux sessions) counts as the test's.
    """
    guard = LeakGuard.begin(os.environ["HOME"], (hermetic_session / "t",))
    yield
    tmp = getattr(request.node, "funcargs", {}).get("tmp_path")
    if tmp is not None:  # known only now: the test's fixtures are set up after this one
        guard.marks = (str(tmp),)
    left = guard.check()
    if left:
        message = left.describe()
        guard.clean(left)
        pytest.fail(message, pytrace=False)


@pytest.fixture(autouse=True)
def _loopback_only(request: pytest.FixtureRequest) -> Iterator[None]:
    """Refuse connections outside loopback, except in the ``agents`` tier (npm installs).

    A private MonkeyPatch, not the ``monkeypatch`` fixture: requesting that here would set
    it up before every test's own fixtures and so undo a test's patches (its PATH) only
    after those fixtures' teardowns have run under them.
    """
    if request.node.get_closest_marker("agents") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", loopback_only(socket.socket.connect))
        patch.setattr(socket.socket, "connect_ex", loopback_only(socket.socket.connect_ex))
        yield


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    """Dispose the process's cached database engines after every test.

    ``store.engine.open_engine`` keeps one engine per database path for the life of the
    process; without this a test's pooled connections outlive its ``tmp_path``. The module
    is looked up, not imported, so tests that never touch the store stay free of
    SQLAlchemy.
    """
    yield
    engine = sys.modules.get("fractal.store.engine")
    if engine is not None:
        engine.close_engines()


_TEMPLATE_LOCK = threading.Lock()


def _upgrade_from_template(real: Callable[[Path], None], template: Path
                           ) -> Callable[[Path], None]:
    """``schema._upgrade`` that copies ``template`` (migrated on first use) to a new file."""

    def upgrade(db_path: Path) -> None:
        if db_path.exists() and db_path.stat().st_size > 0:
            real(db_path)  # a database with content: the real migration path
            return
        with _TEMPLATE_LOCK:
            if not template.exists():
                real(template)
                con = sqlite3.connect(template)
                try:
                    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    con.close()
        shutil.copyfile(template, db_path)

    return upgrade


@pytest.fixture(autouse=True)
def _schema_from_template(request: pytest.FixtureRequest,
                          hermetic_session: Path) -> Iterator[None]:
    """New databases of this process are copies of one migrated once (see module docstring)."""
    if getattr(request.module, "REAL_MIGRATIONS", False):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "_upgrade", _upgrade_from_template(
            schema._upgrade, hermetic_session / f"head-{schema.HEAD_REVISION}.db"))
        yield


@pytest.fixture
def short_lock_settle() -> Iterator[None]:
    """A commit waits 0.3 s, not ``LOCK_SETTLE``, for an ``index.lock`` to vanish on its
    own: for tests whose lock is a leftover (or held for good) by construction, where that
    wait can only run out."""
    from fractal.workspace import commit_lock

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(commit_lock, "LOCK_SETTLE", 0.3)
        yield
