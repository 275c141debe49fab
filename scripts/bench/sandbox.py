"""A throwaway tree for the benchmark: temp HOME, private tmux server, a no-op agent.

Everything the bench starts (the CLI, tmux, the supervisors it hosts) sees only the
sandbox environment: ``HOME``/XDG dirs and ``TMUX_TMPDIR`` under one temp directory,
``FRACTAL_*``, ``TMUX`` and the loop variables removed. ``close()`` kills the private
tmux server, waits for every supervisor the bench saw to be gone, and deletes the
directory.
"""

from __future__ import annotations

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

SETTLED = frozenset({"completed", "stopped", "exited", "killed"})
ROOT = "main"
NOOP_AGENT = "#!/bin/sh\nexec cat >/dev/null\n"  # reads the prompt, exits 0

_LOOP_VARS = ("TMUX", "TMUX_PANE", "_NODE", "RUN_ID", "ITER", "ITER_ID", "STEP_ID", "ITER_REF",
              "NODE_BRANCH", "NODE_DIR", "WORKTREE_DIR", "STEP_LABEL", "ITER_LABEL",
              "AGENT_COMMAND")


class BenchError(RuntimeError):
    """The sandbox could not be built or a run did not behave (the numbers would lie)."""


def _fractal_argv() -> list[str]:
    script = Path(sys.executable).parent / "fractal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fractal"]


def _hermetic_env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FRACTAL_") and k not in _LOOP_VARS}
    home = base / "home"
    tmux_dir = base / "t"
    home.mkdir()
    tmux_dir.mkdir(mode=0o700)
    env.update({
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local/share"),
        "TMUX_TMPDIR": str(tmux_dir), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C.UTF-8",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    })
    return env


def git(cwd: Path, *args: str) -> None:
    """Run git quietly in ``cwd``; raise BenchError on failure."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")


@dataclass
class Sandbox:
    """A repository rooted as a tree whose agent is the no-op script."""

    base: Path
    env: dict[str, str]
    supervisors: set[tuple[int, float]] = field(default_factory=set)  # (pid, start ticks)

    @property
    def repo(self) -> Path:
        return self.base / "repo"

    @property
    def db(self) -> Path:
        return self.repo / ".fractal" / ROOT / "fractal.db"

    @property
    def socket(self) -> Path:
        return Path(self.env["TMUX_TMPDIR"]) / f"tmux-{os.getuid()}" / "default"

    @classmethod
    def create(cls, database: str | None = None) -> Sandbox:
        """Make the temp dir (short path: tmux sockets must fit in 108 bytes), the repo and
        the tree (``fractal init --agent <no-op>``), its ledger in the PostgreSQL database
        ``database`` names (``FRACTAL_DATABASE_URL`` for every command) when given.
        Raises BenchError."""
        if shutil.which("tmux") is None:
            raise BenchError("tmux is not installed; run make bootstrap")
        base = Path(tempfile.mkdtemp(prefix="fxb-"))
        box = cls(base=base, env=_hermetic_env(base))
        if database is not None:
            box.env["FRACTAL_DATABASE_URL"] = database
        try:
            agent = base / "noop-agent"
            agent.write_text(NOOP_AGENT)
            agent.chmod(0o755)
            box.repo.mkdir()
            git(box.repo, "init", "-q", "-b", ROOT)
            git(box.repo, "config", "user.name", "Bench")
            git(box.repo, "config", "user.email", "bench@example.invalid")
            (box.repo / "README.md").write_text("bench project\n")
            git(box.repo, "add", "README.md")
            git(box.repo, "commit", "-q", "-m", "initial commit")
            box.cli("init", "--agent", str(agent))
        except BaseException:
            box.close()
            raise
        return box

    def cli(self, *args: str, extra_env: Mapping[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``fractal ARGS`` in the repo; raise BenchError when it exits non-zero."""
        env = {**self.env, **(extra_env or {})}
        proc = subprocess.run([*_fractal_argv(), *args], cwd=self.repo, env=env, text=True,
                              capture_output=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise BenchError(f"fractal {' '.join(args)} exited {proc.returncode}: "
                             f"{proc.stderr.strip()}")
        return proc

    def timed_cli(self, args: list[str]) -> float:
        """Wall seconds of one ``fractal ARGS`` subprocess (spawn to reap). Raises BenchError."""
        started = time.perf_counter()
        proc = subprocess.run([*_fractal_argv(), *args], cwd=self.repo, env=self.env,
                              capture_output=True, check=False)
        took = time.perf_counter() - started
        if proc.returncode != 0:
            raise BenchError(f"fractal {' '.join(args)} exited {proc.returncode}")
        return took

    def add_node(self, name: str, *, steps: int, max_iters: int) -> None:
        """``fractal node init NAME --max-iters N --no-sync``, then ``steps`` one-line step
        files, an empty ``scripts/setup.sh``, committed on the node's branch."""
        self.cli("node", "init", name, "--max-iters", str(max_iters), "--no-sync")
        worktree = self.repo / ".worktrees" / f"{ROOT}.{name}"
        node_dir = worktree / ".fractal" / f"{ROOT}.{name}"
        shutil.rmtree(node_dir / "steps")
        (node_dir / "steps").mkdir()
        for number in range(1, steps + 1):
            (node_dir / "steps" / f"{number:02d}-S{number:02d}.md").write_text("Do nothing.\n")
        (node_dir / "scripts" / "setup.sh").write_text("")
        git(worktree, "add", "-A")
        git(worktree, "commit", "-q", "-m", "bench steps", "--no-verify")

    def add_custom_node(self, name: str, steps: Mapping[str, str], *opts: str) -> None:
        """``fractal node init NAME OPTS``, its step files replaced by ``steps`` (file name ->
        body), an empty ``scripts/setup.sh``, committed on the node's branch."""
        self.cli("node", "init", name, *opts)
        worktree = self.repo / ".worktrees" / f"{ROOT}.{name}"
        node_dir = worktree / ".fractal" / f"{ROOT}.{name}"
        shutil.rmtree(node_dir / "steps")
        (node_dir / "steps").mkdir()
        for filename, body in steps.items():
            (node_dir / "steps" / filename).write_text(body)
        (node_dir / "scripts" / "setup.sh").write_text("")
        git(worktree, "add", "-A")
        git(worktree, "commit", "-q", "-m", "bench steps", "--no-verify")

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        """Rows of a read-only query on the tree's database (``?`` markers; on a
        PostgreSQL ledger through the store's libpq read connection)."""
        url = self.env.get("FRACTAL_DATABASE_URL")
        if url:
            from fractal.store.pgdriver import ReadConnection

            pg = ReadConnection(url)
            try:
                return [tuple(row) for row in pg.execute(query, params).fetchall()]
            finally:
                pg.close()
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5.0)
        try:
            return list(con.execute(query, params))
        finally:
            con.close()

    def node_state(self, name: str) -> tuple[str, int | None]:
        """(status, supervisor pid or None) of node ``name``."""
        rows = self.sql("SELECT status, supervisor_pid FROM nodes WHERE node = ?",
                        f"{ROOT}.{name}")
        if not rows:
            return "missing", None
        status, pid = rows[0]
        return str(status), pid if isinstance(pid, int) else None

    def start(self, name: str, trace: Path | None) -> None:
        """``fractal node start NAME`` with ``FRACTAL_TRACE=trace`` in its environment."""
        self.cli("node", "start", name,
                 extra_env={"FRACTAL_TRACE": str(trace)} if trace else None)

    def note_supervisor(self, pid: int) -> None:
        """Remember a supervisor pid so ``close()`` can make sure it is gone."""
        ticks = _start_ticks(pid)
        if ticks is not None:
            self.supervisors.add((pid, ticks))

    def wait_settled(self, name: str, timeout: float) -> str:
        """Poll until ``name`` settles; return its status. Raises BenchError on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, pid = self.node_state(name)
            if pid is not None:
                self.note_supervisor(pid)
            if status in SETTLED:
                return status
            time.sleep(0.1)
        raise BenchError(f"node {name} did not settle within {timeout:.0f}s")

    def close(self, keep: bool = False) -> None:
        """Kill the private tmux server, make sure no supervisor survives, remove the dir."""
        if self.socket.exists():
            subprocess.run(["tmux", "-S", str(self.socket), "kill-server"],
                           capture_output=True, check=False)
        deadline = time.monotonic() + 15.0
        alive = self._alive_supervisors()
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = self._alive_supervisors()
        for pid in alive:  # ours: started by this bench through `fractal node start`
            os.kill(pid, signal.SIGKILL)
        if not keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def _alive_supervisors(self) -> list[int]:
        return [pid for pid, ticks in self.supervisors if _start_ticks(pid) == ticks]


def _start_ticks(pid: int) -> float | None:
    """Start time of ``pid`` (clock ticks since boot), None when gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else float(fields[19])
