"""End-to-end fixtures: a real repository, the real CLI, a private tmux server.

The agent is ``tests/stubs/agent_stub.py`` behind a wrapper script: a real process that
speaks the command backend's protocol and obeys ``[stub:...]`` markers in its prompt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import git, make_repo, wait_until

STUB = Path(__file__).resolve().parent.parent / "stubs" / "agent_stub.py"
SETTLED = {"completed", "stopped", "exited", "killed"}


def run_cli(args: list[str], cwd: Path, env: Mapping[str, str] | None = None,
            check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``fractal ARGS`` in ``cwd`` as a real subprocess."""
    proc = subprocess.run([sys.executable, "-m", "fractal", *args], cwd=cwd, text=True,
                          capture_output=True, env=dict(env or os.environ), timeout=timeout,
                          check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"fractal {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


@dataclass
class Tree:
    """A tree rooted at ``main`` in ``repo`` whose default agent is the stub."""

    repo: Path
    agent: Path

    @property
    def db(self) -> Path:
        return self.repo / ".fractal" / "main" / "fractal.db"

    def cli(self, *args: str, check: bool = True, cwd: Path | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(list(args), cwd or self.repo, env=env, check=check)

    def worktree(self, name: str) -> Path:
        return self.repo / ".worktrees" / f"main.{name}"

    def node_dir(self, name: str) -> Path:
        return self.worktree(name) / ".fractal" / f"main.{name}"

    def node(self, name: str, steps: Mapping[str, str] | None = None, *opts: str,
             node_md: str = "# Task\n\nDo the step.\n") -> Path:
        """``fractal node init NAME OPTS``, then replace its steps with ``steps``."""
        self.cli("node", "init", name, *opts)
        ndir = self.node_dir(name)
        if steps is not None:
            shutil.rmtree(ndir / "steps")
            (ndir / "steps").mkdir()
            for filename, body in steps.items():
                (ndir / "steps" / filename).write_text(body)
        (ndir / "NODE.md").write_text(node_md)
        git(self.worktree(name), "add", "-A")
        git(self.worktree(name), "commit", "-q", "-m", "test setup", "--no-verify")
        return ndir

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        import sqlite3

        con = sqlite3.connect(self.db)
        try:
            return list(con.execute(query, params))
        finally:
            con.close()

    def status(self, name: str) -> str:
        rows = self.sql("SELECT status FROM nodes WHERE node = ?", f"main.{name}")
        return str(rows[0][0]) if rows else "missing"

    def wait_settled(self, name: str, timeout: float = 60) -> str:
        return self.wait_settled_or(name, set(), timeout)

    def wait_settled_or(self, name: str, also: set[str], timeout: float = 60) -> str:
        """Wait until the node is settled (or in one of ``also``); return its status."""
        done = SETTLED | also
        return str(wait_until(lambda: self.status(name) if self.status(name) in done else "",
                              timeout=timeout, message=f"node {name} to reach {sorted(done)}"))

    def config(self, name: str) -> dict[str, object]:
        data = json.loads((self.node_dir(name) / "config.json").read_text())
        assert isinstance(data, dict)
        return data


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    """A fresh repository with a tree whose agent is the stub."""
    repo = make_repo(tmp_path / "repo")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    agent = bindir / "stub-agent"
    agent.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{STUB}' \"$@\"\n")
    agent.chmod(0o755)
    run_cli(["init", "--agent", str(agent)], repo)
    t = Tree(repo=repo, agent=agent)
    yield t
    _kill_sessions(t)


def _kill_sessions(t: Tree) -> None:
    if not t.db.exists():
        return
    for session, socket in t.sql("SELECT tmux_session, tmux_socket FROM nodes "
                                 "WHERE tmux_session IS NOT NULL"):
        subprocess.run(["tmux", "-S", str(socket), "kill-session", "-t", f"={session}"],
                       capture_output=True, check=False)
