"""A ``fractal node merge`` SIGKILLed at random points (seeded) leaves its target either
untouched or fully merged, never half, and running it again completes the merge.

The kill lands on the ``fractal`` process, as a ``kill -9`` of the command would; a git
command it was running finishes on its own (git's own updates are all-or-nothing per
command), and the test waits for it before looking. The delay before the kill is the
fault injection itself, not a synchronisation.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.workspace.commit_lock import git_processes_in
from fractal.workspace.merge import plan_squash
from tests.helpers import git, make_repo, wait_until

ROUNDS = 6
SEED = 1307


def _fractal(repo: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "fractal", *args], cwd=repo, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _prepare(base: Path) -> tuple[Path, str]:
    repo = make_repo(base / "repo")
    init_tree(repo)
    wt = init_node(open_context(repo), "a", {"title": "many files"}).paths.worktree
    for i in range(40):
        (wt / "src").mkdir(exist_ok=True)
        (wt / "src" / f"m{i}.py").write_text(f"value = {i}\n" * 50)
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "forty modules")
    plan = plan_squash(repo, "main.a", "main")
    assert plan.tree is not None
    return repo, plan.tree


def _state(repo: Path, old: str, expected_tree: str) -> str:
    head = git(repo, "rev-parse", "main")
    clean = git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    if head == old and clean and not (repo / "src").exists():
        return "untouched"
    if git(repo, "rev-parse", "main^") == old and \
            git(repo, "rev-parse", "main^{tree}") == expected_tree and clean:
        return "merged"
    return f"HALF: head={head[:10]} clean={clean} src={(repo / 'src').exists()}"


def _active_rows(repo: Path) -> int:
    con = sqlite3.connect(repo / ".fractal" / "main" / "fractal.db")
    try:
        return int(con.execute("SELECT COUNT(*) FROM merges WHERE status = 'active'")
                   .fetchone()[0])
    finally:
        con.close()


@pytest.mark.timeout(300)
def test_sigkill_at_random_points_never_leaves_half_a_merge(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    probe_repo, _ = _prepare(tmp_path / "probe")
    started = time.monotonic()  # the kill points span the merge command's own run
    probe = _fractal(probe_repo, "node", "merge", "a")
    probe.communicate(timeout=60)
    assert probe.returncode == 0
    span = time.monotonic() - started
    seen: set[str] = set()
    for round_no in range(ROUNDS):
        repo, expected = _prepare(tmp_path / f"r{round_no}")
        old = git(repo, "rev-parse", "main")
        proc = _fractal(repo, "node", "merge", "a")
        time.sleep(rng.uniform(0.0, span))  # the random kill point (fault injection)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        wait_until(lambda repo=repo: not git_processes_in(repo), timeout=30,
                   message="git commands left by the killed merge")
        state = _state(repo, old, expected)
        assert state in ("untouched", "merged"), state
        seen.add(state)
        rerun = _fractal(repo, "node", "merge", "a")
        _out, err = rerun.communicate(timeout=60)
        assert rerun.returncode == 0, err
        assert _state(repo, old, expected) == "merged"
        assert _active_rows(repo) == 0
    print(f"outcomes after the kills: {sorted(seen)}")
