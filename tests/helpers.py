"""Shared test helpers: bounded waits and small git fixtures.

Waits are conditions with deadlines, never bare sleeps. Every timeout is multiplied by
``FRACTAL_TEST_TIMEOUT_SCALE`` (default 1) for slow machines.

``make_repo`` builds a repository once per branch name and session and copies it after
that (``TEMPLATES_ENV`` names the session's template directory; without it every call
runs git); ``copy_of_tree`` does the same for a whole tree a fixture builds (nodes,
worktrees, registry), so a module's tests share one build per test process.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

T = TypeVar("T")

SCALE = float(os.environ.get("FRACTAL_TEST_TIMEOUT_SCALE", "1"))

TEMPLATES_ENV = "FRACTAL_TEST_TEMPLATES"
"""Environment variable naming the directory of this session's template repositories."""


class WaitTimeout(AssertionError):
    """A wait_until predicate never became truthy before its deadline."""


FRACTAL_BIN = str(Path(sys.executable).parent / "fractal")
"""The ``fractal`` a supervisor started by this interpreter belongs to: the path its
agents get as ``FRACTAL_BIN`` and see in every command of their prompts."""

POLL = 0.02
"""Seconds ``wait_until`` sleeps between two looks by default."""
COSTLY_PAUSE = 0.25
"""The longest sleep ``wait_until`` adds after a look that took long: what it may add to a
wait's end (a CLI call under load takes 0.2 to 1 s)."""


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = POLL,
               message: str = "") -> T:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Between two looks it sleeps ``interval`` seconds, or as long as the last look took
    (at most ``COSTLY_PAUSE``) when that was longer: a predicate that costs (a ``fractal``
    CLI call, a tmux capture) then holds a core about half of the wait instead of nearly
    all of it, while a cheap one (a row read) is still seen within ``interval``. An
    ``interval`` below ``POLL`` is a caller catching a short moment (a race window): it is
    kept as given.

    Raises WaitTimeout (an AssertionError) after ``timeout * SCALE`` seconds, with
    ``message`` and the last value seen.
    """
    deadline = time.monotonic() + timeout * SCALE
    last: T | None = None
    while True:
        looked = time.monotonic()
        last = predicate()
        if last:
            return last
        now = time.monotonic()
        if now >= deadline:
            raise WaitTimeout(f"timed out after {timeout * SCALE:.1f}s: {message} (last={last!r})")
        took = min(now - looked, COSTLY_PAUSE) if interval >= POLL else 0.0
        time.sleep(max(interval, min(took, deadline - now)))


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd``; return stripped stdout; raise CalledProcessError on failure."""
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def git_with_identity(cwd: Path, *args: str) -> str:
    """``git`` (as ``git -C cwd``) with a test author and committer given on the command
    line, for a repository made without ``make_repo``'s local identity; return stripped
    stdout; raise CalledProcessError on failure."""
    return git(cwd, "-c", "user.name=T", "-c", "user.email=t@e.invalid", *args)


FIRST_GIT_WAITS = """#!/bin/bash
# core.fsmonitor: the first git to ask says it runs (its pid in {started}) and waits for
# the gate; every later one answers at once (no fsmonitor data: git scans)
[ -e "{once}" ] && exit 1
: > "{once}"
exec 3<>"{gate}"
echo $$ > "{started}"
read -t 20 -u 3 line
exit 1
"""
"""A ``core.fsmonitor`` hook (``gated_fsmonitor``) holding the first git that asks."""


def gated_fsmonitor(monkeypatch: pytest.MonkeyPatch, scratch: Path,
                    script: str = FIRST_GIT_WAITS) -> tuple[Path, Path]:
    """Install ``script`` (formatted with ``once``, ``started``, ``gate`` paths in
    ``scratch``) as the ``core.fsmonitor`` hook of every git this test (and its child
    processes) starts, given as the operator's own ``-c`` in the environment
    (``GIT_CONFIG_PARAMETERS``: fractal's git switches off a repository's fsmonitor, never
    one its caller passes); returns (started, gate): two FIFOs, the hook writes its pid to
    ``started`` and waits until ``open_gate(gate)``."""
    started, gate, once = scratch / "started", scratch / "gate", scratch / "once"
    os.mkfifo(started)
    os.mkfifo(gate)
    hook = scratch / "fsmonitor.sh"
    hook.write_text(script.format(once=once, started=started, gate=gate))
    hook.chmod(0o755)
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{hook}'")
    return started, gate


def open_gate(gate: Path) -> None:
    """Let a ``gated_fsmonitor`` hook that waits on ``gate`` go on."""
    fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"go\n")
    os.close(fd)


def asked_git(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record the arguments of every ``workspace.git.run_git`` call from now on (each
    still runs): the list a test reads to see whether git itself was asked."""
    from fractal.workspace import git as g

    calls: list[list[str]] = []
    real = g.run_git

    def recording(args: list[str], cwd: Path, **kwargs: object) -> object:
        calls.append(list(args))
        return real(args, cwd, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(g, "run_git", recording)
    return calls


def make_repo(path: Path, branch: str = "main") -> Path:
    """Create a git repository at ``path`` with one commit on ``branch`` and a local identity.

    The repository holds ``README.md`` committed as "initial commit" by Test User. Within a
    test session it is a copy of a template built the first time ``branch`` is asked for.
    """
    templates = os.environ.get(TEMPLATES_ENV)
    if not templates:
        return _build_repo(path, branch)
    template = Path(templates) / f"repo-{branch}"
    if not template.exists():
        staging = Path(tempfile.mkdtemp(dir=templates))
        _build_repo(staging / "repo", branch)
        try:
            (staging / "repo").rename(template)
        except OSError:  # another thread won the race: its template is as good
            shutil.rmtree(staging, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template, path, symlinks=True, dirs_exist_ok=True)
    return path


_TREES: dict[str, Path] = {}


def copy_of_tree(path: Path, key: str, build: Callable[[Path], object]) -> Path:
    """A repository at ``path`` that ``build(repo)`` made, built once per ``key`` in this
    process (into a temporary template) and copied for each later call; returns ``path``.

    A copy is the same tree at a new place: the absolute paths a tree records are
    rewritten from the template's to ``path`` (each linked worktree's ``.git`` file and
    its ``gitdir`` back-link, also where ``path`` is a directory holding a repository and
    its worktrees side by side, and the ``worktree`` column of the registry), as git's
    ``worktree repair`` and a re-registration would. ``build`` must leave no process
    behind and every database engine closed; the rows it wrote (events, timestamps) are
    the copy's history. On a PostgreSQL ledger (``--backend``) it builds at ``path`` each
    time: the rows live in the test's own database, not in the copied files.
    """
    if os.environ.get("FRACTAL_DATABASE_URL"):  # a PostgreSQL ledger: the test's own
        build(path)  # database holds the rows, so the tree is built anew in it
        return path
    if key not in _TREES:
        from fractal.store.engine import close_engines

        base = Path(tempfile.mkdtemp(prefix="fx-tree-", dir=os.environ.get(TEMPLATES_ENV)))
        atexit.register(shutil.rmtree, base, True)
        build(base / "repo")
        close_engines()
        for db in (base / "repo").glob(".fractal/*/fractal.db"):
            con = sqlite3.connect(db)
            try:
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                con.close()
        _TREES[key] = base / "repo"
    template = _TREES[key]
    path.parent.mkdir(parents=True, exist_ok=True)
    # the WAL was checkpointed into the database file: its sidecars carry nothing
    shutil.copytree(template, path, symlinks=True,
                    ignore=shutil.ignore_patterns("*.db-wal", "*.db-shm"))
    old, new = str(template), str(path)
    links = [*path.glob(".git/worktrees/*/gitdir"), *path.glob(".worktrees/*/.git"),
             # a directory holding a repository and its worktrees side by side
             *path.glob("*/.git/worktrees/*/gitdir"),
             *(dot for dot in path.glob("*/.git") if dot.is_file())]
    for link in links:
        link.write_text(link.read_text().replace(old, new))
    for db in path.glob(".fractal/*/fractal.db"):
        con = sqlite3.connect(db)
        try:
            with con:
                con.execute("UPDATE nodes SET worktree = ? || substr(worktree, ?) "
                            "WHERE worktree LIKE ? || '%'", (new, len(old) + 1, old))
        finally:
            con.close()
    return path


def _build_repo(path: Path, branch: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.name", "Test User")
    git(path, "config", "user.email", "test@example.com")
    (path / "README.md").write_text("sample project\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial commit")
    return path


def force_status(db_path: Path, node: str, status: str) -> None:
    """Set a node's status directly in the database, as a test's setup (the product writes
    statuses only through ``Ledger.move``)."""
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE nodes SET status = ? WHERE node = ?", (status, node))


def pid_alive(pid: int) -> bool:
    """Process ``pid`` exists and has not exited: gone, a zombie (``Z``) or dead (``X``)
    in ``/proc/<pid>/stat`` all read as not alive. Never raises."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


class TreeLayout:
    """Where a tree rooted at ``main`` in ``self.repo`` keeps things, a node named by its
    short name (``name`` is ``main.<name>``'s last part): the tree database, a node's
    worktree and its node directory. Shared by ``tests.trees.Tree`` and
    ``tests.loopfakes.LoopTree``."""

    repo: Path

    @property
    def db(self) -> Path:
        return self.repo / ".fractal" / "main" / "fractal.db"

    def worktree(self, name: str) -> Path:
        return self.repo / ".worktrees" / f"main.{name}"

    def node_dir(self, name: str) -> Path:
        return self.worktree(name) / ".fractal" / f"main.{name}"


def recording_hook(scratch: Path, *, argv: bool = False) -> tuple[Path, Path]:
    """A notify hook that records each call: ``(hook, calls)``, the executable
    ``scratch/hook.sh`` and the directory ``scratch/calls`` where call ``n`` (from 0)
    leaves its stdin as ``n.json`` and its environment as ``n.env``, and with ``argv``
    its ``$0 $*`` as ``n.argv``, written last (so once it is there the call ran whole)."""
    calls = scratch / "calls"
    calls.mkdir()
    hook = scratch / "hook.sh"
    hook.write_text(f"#!/bin/sh\nn=$(ls '{calls}' | wc -l)\ncat > '{calls}/'$n.json\n"
                    f"env > '{calls}/'$n.env\n"
                    + (f"echo \"$0 $*\" > '{calls}/'$n.argv\n" if argv else ""))
    hook.chmod(0o755)
    return hook, calls


def group_alive(pgid: int) -> bool:
    """A live process (neither a zombie nor dead) is still in process group ``pgid``, as
    ``/proc/<pid>/stat`` tells. Never raises."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                state, _ppid, group = stat.read().rsplit(b")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state not in (b"Z", b"X"):
            return True
    return False


class SqlTree(Protocol):
    """A tree harness that reads its database: ``tests.trees.Tree``, ``LoopTree``."""

    def sql(self, query: str, *params: object) -> list[tuple[Any, ...]]: ...


def check_rows(tree: SqlTree, name: str) -> list[tuple[object, ...]]:
    """The ``checks`` rows of node ``main.<name>``, oldest first: (kind, iteration number,
    exit code, signature, failures, passed, output path, step id)."""
    return tree.sql("SELECT c.kind, i.iter, c.exit_code, c.signature, c.failures, c.passed, "
                    "c.output_path, c.step_id FROM checks c JOIN iterations i "
                    "ON i.iter_id = c.iter_id WHERE c.node = ? ORDER BY c.check_id",
                    f"main.{name}")


def no_hold(repo: Path) -> None:
    """Set the tree's ``inbox_grace`` to 0: an item a running parent loop could act on,
    and the operator's own pause, reach the operator at once (a test of an item's words,
    not of who it is for)."""
    from fractal.tree import find_tree
    from fractal.workspace.nodedir import update_config

    update_config(find_tree(repo).config_path, {"inbox_grace": 0})
