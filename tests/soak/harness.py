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
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tests.helpers import wait_until
from tests.soak.invariants import tree_processes
from tests.trees import SETTLED, Tree, agent_wrapper, init_tree

AGENT = Path(__file__).resolve().parent / "agent.py"

__all__ = ["AGENT", "SETTLED", "SoakTree", "keep_leftovers"]


def keep_leftovers(worktree: Path, *, wait: float | None = None) -> bool:
    """Commit everything a settled node left uncommitted in ``worktree`` (``git add -A``,
    ``operator: keep leftovers``, hooks bypassed), as an operator does before ``node
    start --continue``; True when a commit landed. Taken under the worktree's commit turn
    (``commit_lock.commit_turn``, ``wait`` seconds at most, its default when None), so it
    never runs beside a ``fractal commit`` or a backstop still finishing there; a turn not
    had in time, a worktree that is gone or a commit git refuses is no commit (False)."""
    from fractal.errors import FractalError
    from fractal.workspace.commit_lock import COMMIT_TURN_WAIT, commit_turn

    if not (worktree / ".git").exists():
        return False

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=worktree, capture_output=True, text=True,
                              check=False)

    try:
        with commit_turn(worktree, wait=COMMIT_TURN_WAIT if wait is None else wait):
            if not run("status", "--porcelain").stdout.strip():
                return False
            run("add", "-A")
            return run("commit", "-q", "--no-verify", "-m",
                       "operator: keep leftovers").returncode == 0
    except FractalError:
        return False


@dataclass(kw_only=True)
class SoakTree(Tree):
    """A tree rooted at ``main`` whose default agent is the soak agent (``tests.trees.Tree``
    plus the journal, a tmux server of its own and the faults it must undo)."""

    base: Path
    env: dict[str, str]
    mounts: list[Path] = field(default_factory=list)
    frozen: list[Path] = field(default_factory=list)

    cli_timeout: ClassVar[float] = 90
    node_md: ClassVar[str] = "# Task\n\nSoak.\n"

    @property
    def journal(self) -> Path:
        return self.base / "journal.jsonl"

    @classmethod
    def create(cls, seed: str, extra_env: Mapping[str, str] | None = None,
               sandbox: str = "off") -> SoakTree:
        """A repository with a tree (``fractal init --agent <soak agent>``) whose
        ``sandbox`` setting is ``sandbox`` (``tests.trees.init_tree``)."""
        base = Path(tempfile.mkdtemp(prefix="fxs-"))
        (base / "t").mkdir(mode=0o700)
        env = {**os.environ, "TMUX_TMPDIR": str(base / "t"), "FRACTAL_KILL_GRACE": "1",
               "SOAK_JOURNAL": str(base / "journal.jsonl"), "SOAK_SEED": seed,
               **(extra_env or {})}
        box = cls(repo=base / "repo", agent=base / "soak-agent", base=base, env=env)
        try:
            agent_wrapper(box.agent, AGENT)
            init_tree(box.repo, box.agent, env=env, timeout=cls.cli_timeout,
                      sandbox=sandbox)
        except BaseException:
            box.close()
            raise
        return box

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
        self.close_readers()
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
