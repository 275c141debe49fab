"""A tree for one fault scenario: a fresh repository, the real CLI, a private tmux server
of its own, the soak agent (tests/soak/agent.py) and its journal.

Each ``SoakTree`` gets a short temp directory (tmux sockets must fit in 108 bytes) holding
its own ``TMUX_TMPDIR``, so killing "the" tmux server kills this tree's only. ``close()``
kills that server, ends whatever process of the tree is still alive (found by
``invariants.tree_processes``: only processes this scenario started), undoes immutable
flags and mounts, and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.e2e.conftest import run_cli
from tests.helpers import git, make_repo, wait_until
from tests.soak.invariants import tree_processes

AGENT = Path(__file__).resolve().parent / "agent.py"
SETTLED = frozenset({"completed", "stopped", "exited", "killed"})


@dataclass
class SoakTree:
    """A tree rooted at ``main`` whose default agent is the soak agent."""

    base: Path
    env: dict[str, str]
    mounts: list[Path] = field(default_factory=list)
    frozen: list[Path] = field(default_factory=list)

    @property
    def repo(self) -> Path:
        return self.base / "repo"

    @property
    def db(self) -> Path:
        return self.repo / ".fractal" / "main" / "fractal.db"

    @property
    def journal(self) -> Path:
        return self.base / "journal.jsonl"

    @property
    def socket(self) -> Path:
        return Path(self.env["TMUX_TMPDIR"]) / f"tmux-{os.getuid()}" / "default"

    @classmethod
    def create(cls, seed: str, extra_env: Mapping[str, str] | None = None) -> SoakTree:
        """A repository with a tree (``fractal init --agent <soak agent>``)."""
        base = Path(tempfile.mkdtemp(prefix="fxs-"))
        (base / "t").mkdir(mode=0o700)
        env = {**os.environ, "TMUX_TMPDIR": str(base / "t"), "FRACTAL_KILL_GRACE": "1",
               "SOAK_JOURNAL": str(base / "journal.jsonl"), "SOAK_SEED": seed,
               **(extra_env or {})}
        box = cls(base=base, env=env)
        try:
            agent = base / "soak-agent"
            agent.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{AGENT}' \"$@\"\n")
            agent.chmod(0o755)
            make_repo(box.repo)
            box.cli("init", "--agent", str(agent))
        except BaseException:
            box.close()
            raise
        return box

    # -- the CLI and the record -----------------------------------------------------------

    def cli(self, *args: str, check: bool = True, cwd: Path | None = None,
            env: Mapping[str, str] | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``fractal ARGS`` as a subprocess with this tree's environment (plus ``env``)."""
        return run_cli(list(args), cwd or self.repo, env={**self.env, **(env or {})},
                       check=check, timeout=timeout)

    def worktree(self, name: str) -> Path:
        return self.repo / ".worktrees" / f"main.{name}"

    def node_dir(self, name: str) -> Path:
        return self.worktree(name) / ".fractal" / f"main.{name}"

    def gitdir(self, name: str) -> Path:
        """The worktree's private git dir (where its ``index.lock`` lives)."""
        return self.repo / ".git" / "worktrees" / f"main.{name}"

    def node(self, name: str, steps: Mapping[str, str], *opts: str,
             setup: str | None = None) -> Path:
        """``fractal node init NAME OPTS``; replace its steps (and setup.sh); commit."""
        self.cli("node", "init", name, *opts)
        ndir = self.node_dir(name)
        shutil.rmtree(ndir / "steps")
        (ndir / "steps").mkdir()
        for filename, body in steps.items():
            (ndir / "steps" / filename).write_text(body)
        if setup is not None:
            (ndir / "scripts" / "setup.sh").write_text(setup)
        (ndir / "NODE.md").write_text("# Task\n\nSoak.\n")
        git(self.worktree(name), "add", "-A")
        git(self.worktree(name), "commit", "-q", "-m", "soak setup", "--no-verify")
        return ndir

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        con = sqlite3.connect(self.db, timeout=30.0)
        try:
            return list(con.execute(query, params))
        finally:
            con.close()

    def status(self, name: str) -> str:
        rows = self.sql("SELECT status FROM nodes WHERE node = ?", f"main.{name}")
        return str(rows[0][0]) if rows else "missing"

    def wait_status(self, name: str, wanted: frozenset[str] | set[str] = SETTLED,
                    timeout: float = 60) -> str:
        return str(wait_until(lambda: (s := self.status(name)) in wanted and s,
                              timeout=timeout, message=f"node {name} to reach {sorted(wanted)}"))

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

    def session_alive(self, name: str) -> bool:
        proc = subprocess.run(["tmux", "-S", str(self.socket), "has-session", "-t",
                               f"=main.{name}"], capture_output=True, check=False)
        return proc.returncode == 0

    def heal(self) -> str:
        """``fractal node list`` (it heals crashed nodes); returns its CSV."""
        return self.cli("node", "list", "--csv").stdout

    def pause_bystander(self, name: str = "bystander") -> None:
        """A node parked mid-step: init, start, pause, wait until its pane is gone."""
        self.node(name, {"01-WAIT.md": "[soak:chunks=2] [soak:wait-file=/nonexistent]\n"},
                  "--no-sync", "--max-iters", "1")
        self.cli("node", "start", name)
        self.wait_running(name)
        self.cli("node", "pause", name)
        self.wait_status(name, {"paused"})
        wait_until(lambda: not self.session_alive(name), timeout=15,
                   message=f"{name}'s pane to exit")
        wait_until(lambda: not self.sql("SELECT supervisor_pid FROM nodes WHERE node = ? "
                                        "AND supervisor_pid IS NOT NULL", f"main.{name}"),
                   timeout=15, message=f"{name}'s supervisor to exit")

    # -- faults that need undoing ---------------------------------------------------------

    def freeze(self, path: Path) -> None:
        """Make ``path`` and everything under it unwritable (immutable as root)."""
        self.frozen.append(path)
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-R", "+i", str(path)], check=True, capture_output=True)
        else:
            subprocess.run(["chmod", "-R", "a-w", str(path)], check=True, capture_output=True)

    def full_mount(self, path: Path, kib: int = 64) -> None:
        """Mount a ``kib`` KiB tmpfs at ``path`` and fill it (root only)."""
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)],
                       check=True, capture_output=True)
        self.mounts.append(path)
        with contextlib.suppress(OSError), (path / ".filler").open("wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()

    def close(self) -> None:
        """Kill the tmux server and every leftover process of the tree; remove the dir."""
        if self.socket.exists():
            subprocess.run(["tmux", "-S", str(self.socket), "kill-server"],
                           capture_output=True, check=False)
        for path in self.frozen:
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True, check=False)
            else:
                subprocess.run(["chmod", "-R", "u+w", str(path)], capture_output=True, check=False)
        if self.db.exists():
            deadline = time.monotonic() + 10
            while (left := tree_processes(self.repo)) and time.monotonic() < deadline:
                time.sleep(0.1)
            for proc in left:  # this scenario's own processes, found by the tree scan
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for path in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        shutil.rmtree(self.base, ignore_errors=True)
