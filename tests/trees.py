"""The one tree harness of the end-to-end and soak tiers: a real repository, the real CLI.

``Tree`` wraps a repository holding a tree rooted at ``main``: ``cli`` runs ``fractal`` as
a subprocess, ``node`` creates a node with chosen step files, ``sql`` reads the tree
database with plain ``sqlite3``, and the ``wait_*`` helpers poll a node's row with a
deadline (``tests.helpers.wait_until``). ``init_tree`` builds one: a fresh repository, a
wrapper script that runs a Python agent, ``fractal init --agent <wrapper>``.

``tests/e2e/conftest.py`` builds its ``tree`` fixture from it (agent:
``tests/stubs/agent_stub.py``); ``tests/soak/harness.py`` derives ``SoakTree`` (agent:
``tests/soak/agent.py``, a tmux server of its own, fault undoing).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import psutil

from tests import cliserver, ledgersql
from tests.helpers import TreeLayout, git, make_repo, wait_until

STUB = Path(__file__).resolve().parent / "stubs" / "agent_stub.py"
"""The e2e agent: speaks the command backend's protocol, obeys ``[stub:...]`` markers."""

SETTLED = frozenset({"completed", "stopped", "exited", "killed"})
"""Node statuses after a run has ended."""


def run_cli(args: list[str], cwd: Path, env: Mapping[str, str] | None = None,
            check: bool = True, timeout: float = 60,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``fractal ARGS`` in ``cwd`` as a real subprocess (``env`` defaults to ours; stdin
    is ``input``, or ``/dev/null``).

    With ``check``, a nonzero exit raises AssertionError showing both streams. The process
    is forked from a server that has the CLI imported already (``tests/cliserver.py``).
    """
    proc = cliserver.run(args, cwd, env=dict(env or os.environ), timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"fractal {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def run_cli_as(cwd: Path, *args: str, loop: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    """``fractal ARGS`` in ``cwd`` as the operator, or, given ``loop`` (a node directory,
    ``<worktree>/.fractal/<branch>``), as that node's loop would run it (``_NODE`` set).

    Never raises on a nonzero exit: the caller asserts on the returned process."""
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}
    if loop is not None:
        env["_NODE"] = str(loop)
    return run_cli(list(args), cwd, env=env, check=False)


def cousins_node_dir(repo: Path, branch: str) -> Path:
    """The node directory of ``branch`` in a tree built by ``build_cousins``."""
    return repo / ".worktrees" / branch / ".fractal" / branch


def build_cousins(repo: Path) -> None:
    """``main`` with children ``main.a1`` and ``main.a2`` and a child ``x`` under each
    (two nodes answer to the short name ``x``), made by the CLI in a new repository at
    ``repo``. Raises AssertionError when a verb fails."""
    make_repo(repo)
    for args in (["init"], ["node", "init", "a1"], ["node", "init", "a2"]):
        assert run_cli_as(repo, *args).returncode == 0
    for parent in ("a1", "a2"):
        out = run_cli_as(repo / ".worktrees" / f"main.{parent}", "node", "init", "x")
        assert out.returncode == 0, out.stderr


def agent_wrapper(path: Path, script: Path) -> Path:
    """Write an executable ``path`` that runs ``script`` with this Python; return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{script}' \"$@\"\n")
    path.chmod(0o755)
    return path


@dataclass
class Tree(TreeLayout):
    """A tree rooted at ``main`` in ``repo`` whose default agent is ``agent``.

    ``env`` is the environment every ``cli`` call gets (None: this process's own, read at
    call time); a call's own ``env`` replaces it.
    """

    repo: Path
    agent: Path
    env: dict[str, str] | None = None
    _readers: dict[int, tuple[tuple[int, ...], sqlite3.Connection]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    cli_timeout: ClassVar[float] = 60
    """Seconds one ``fractal`` call may take."""
    node_md: ClassVar[str] = "# Task\n\nDo the step.\n"
    """The NODE.md ``node`` writes unless told otherwise."""

    # -- paths ----------------------------------------------------------------------------

    def gitdir(self, name: str) -> Path:
        """The worktree's private git dir (where its ``index.lock`` lives)."""
        return self.repo / ".git" / "worktrees" / f"main.{name}"

    @property
    def socket(self) -> Path:
        """The tmux socket nodes of this tree start on (from ``TMUX_TMPDIR``)."""
        tmpdir = (self.env if self.env is not None else os.environ).get("TMUX_TMPDIR")
        return Path(tmpdir or "/tmp") / f"tmux-{os.getuid()}" / "default"

    # -- the CLI --------------------------------------------------------------------------

    def cli(self, *args: str, check: bool = True, cwd: Path | None = None,
            env: Mapping[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """``fractal ARGS`` in ``cwd`` (default: the repository) as a subprocess."""
        return run_cli(list(args), cwd or self.repo, env=env if env is not None else self.env,
                       check=check, timeout=timeout or self.cli_timeout)

    def node(self, name: str, steps: Mapping[str, str] | None = None, *opts: str,
             node_md: str | None = None, setup: str | None = None) -> Path:
        """``fractal node init NAME OPTS``; replace its steps (and ``setup.sh``) when given,
        write NODE.md, commit; return the node dir."""
        self.cli("node", "init", name, *opts)
        ndir = self.node_dir(name)
        if steps is not None:
            shutil.rmtree(ndir / "steps")
            (ndir / "steps").mkdir()
            for filename, body in steps.items():
                (ndir / "steps" / filename).write_text(body)
        if setup is not None:
            (ndir / "scripts" / "setup.sh").write_text(setup)
        (ndir / "NODE.md").write_text(self.node_md if node_md is None else node_md)
        git(self.worktree(name), "add", "-A")
        git(self.worktree(name), "commit", "-q", "-m", "test setup", "--no-verify")
        return ndir

    def config(self, name: str) -> dict[str, object]:
        data = json.loads((self.node_dir(name) / "config.json").read_text())
        assert isinstance(data, dict)
        return data

    # -- the record -----------------------------------------------------------------------

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        """Rows of ``query`` on the tree database (plain sqlite3, 30 s busy timeout; on a
        PostgreSQL ledger, ``tests.ledgersql``).

        Reads go through one connection per thread, kept while the database file stays
        the same (device, inode, size, modification time): a new connection parses the
        whole schema at its first statement (about a millisecond), most of the cost of
        each look of a ``wait_status`` poll. A file replaced, removed or written in place
        gets a new connection, as every call used to; ``close_readers`` ends them.
        """
        if ledgersql.backend() == "postgres":
            return ledgersql.rows(self.db, query, *params)
        key = threading.get_ident()
        try:
            stat = os.stat(self.db)
            stamp: tuple[int, ...] = (stat.st_dev, stat.st_ino, stat.st_size,
                                      stat.st_mtime_ns)
        except OSError:
            stamp = ()
        held = self._readers.get(key)
        if held is not None and (held[0] != stamp or not stamp):
            held[1].close()
            held = None
        if held is None:
            con = sqlite3.connect(self.db, timeout=30.0)
            if not stamp:  # a missing file: read it once, as a fresh connection did
                try:
                    return list(con.execute(query, params))
                finally:
                    con.close()
            held = self._readers[key] = (stamp, con)
        return list(held[1].execute(query, params))

    def close_readers(self) -> None:
        """Close the connections ``sql`` keeps (a test's teardown; idempotent)."""
        readers, self._readers = self._readers, {}
        for _stamp, con in readers.values():
            con.close()

    def status(self, name: str) -> str:
        rows = self.sql("SELECT status FROM nodes WHERE node = ?", f"main.{name}")
        return str(rows[0][0]) if rows else "missing"

    def wait_status(self, name: str, wanted: frozenset[str] | set[str] = SETTLED,
                    timeout: float = 60) -> str:
        """Wait until the node's status is one of ``wanted``; return it."""
        return str(wait_until(lambda: (s := self.status(name)) in wanted and s,
                              timeout=timeout, message=f"node {name} to reach {sorted(wanted)}"))

    def wait_settled(self, name: str, timeout: float = 60) -> str:
        return self.wait_status(name, SETTLED, timeout)

    def wait_settled_or(self, name: str, also: set[str], timeout: float = 60) -> str:
        """Wait until the node is settled (or in one of ``also``); return its status."""
        return self.wait_status(name, SETTLED | also, timeout)

    def running_step(self, name: str, step_name: str | None = None) -> tuple[int, int] | None:
        """(step_id, pgid) of the node's open step with a process group, if any."""
        query = ("SELECT step_id, pgid FROM steps WHERE node = ? AND ended_at IS NULL "
                 "AND pgid IS NOT NULL")
        params: list[object] = [f"main.{name}"]
        if step_name is not None:
            query += " AND step_name = ?"
            params.append(step_name)
        rows = self.sql(query + " ORDER BY step_id DESC LIMIT 1", *params)
        return (int(str(rows[0][0])), int(str(rows[0][1]))) if rows else None

    def wait_running(self, name: str, step_name: str | None = None,
                     timeout: float = 30) -> tuple[int, int]:
        found = wait_until(lambda: self.running_step(name, step_name), timeout=timeout,
                           message=f"{name} step {step_name or '*'} running")
        assert found is not None
        return found

    def supervisor(self, name: str) -> psutil.Process:
        """The node's running supervisor (waits for it to record itself)."""
        def find() -> psutil.Process | None:
            rows = self.sql("SELECT supervisor_pid, supervisor_started FROM nodes "
                            "WHERE node = ?", f"main.{name}")
            if not rows or rows[0][0] is None:
                return None
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(int(str(rows[0][0])))
                if abs(proc.create_time() - float(str(rows[0][1]))) < 0.05:
                    return proc
            return None
        found = wait_until(find, timeout=30, message=f"supervisor of {name}")
        assert found is not None
        return found

    # -- tmux -----------------------------------------------------------------------------

    def session_alive(self, name: str) -> bool:
        proc = subprocess.run(["tmux", "-S", str(self.socket), "has-session", "-t",
                               f"=main.{name}"], capture_output=True, check=False)
        return proc.returncode == 0

    def kill_sessions(self) -> None:
        """Kill every node's recorded tmux session (the teardown of a test's tree); the
        connections ``sql`` keeps are closed."""
        if not self.db.exists():
            self.close_readers()
            return
        sessions = self.sql("SELECT tmux_session, tmux_socket FROM nodes "
                            "WHERE tmux_session IS NOT NULL")
        self.close_readers()
        for session, sock in sessions:
            subprocess.run(["tmux", "-S", str(sock), "kill-session", "-t", f"={session}"],
                           capture_output=True, check=False)


def init_tree(repo: Path, agent: Path | None, env: Mapping[str, str] | None = None,
              timeout: float = 60, sandbox: str = "off") -> None:
    """A fresh repository at ``repo`` (``tests.helpers.make_repo``) with a tree in it:
    ``fractal init``, plus ``--agent AGENT`` when given, and the tree's ``sandbox``
    setting. It is ``off`` by default here: the stub agents of the e2e, soak and real-CLI
    tiers record what they saw in files beside the repository (``tmp_path``), which the
    sandbox keeps read-only; ``tests/security`` runs the same CLI sandboxed."""
    make_repo(repo)
    run_cli(["init", *(["--agent", str(agent)] if agent is not None else [])], repo,
            env=env, timeout=timeout)
    set_sandbox(repo, sandbox)


def set_sandbox(repo: Path, mode: str) -> None:
    """Write ``"sandbox": mode`` into every tree's config.json in ``repo`` (the root
    data dirs), as an operator would by hand."""
    for config in (repo / ".fractal").glob("*/config.json"):
        data = json.loads(config.read_text(encoding="utf-8"))
        data["sandbox"] = mode
        config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
