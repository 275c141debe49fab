"""A ``fractal node merge`` killed with SIGKILL while git writes its scratch index or its
squash commit leaves no file in the system's temporary directory; what it leaves in the
repository's git directory is removed by the next merge.

The kill is the merge process's own (``os.kill(os.getpid(), SIGKILL)`` when git is about
to run the named command), so it lands at exactly that point, no timing involved.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from tests.helpers import git, make_repo

KILLED_AT = """
import os, signal, sys
from pathlib import Path
import fractal.workspace.merge as merge, fractal.workspace.mergebase as mergebase
from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.squash import merge_node

real = merge.run_git
def run_git(args, cwd, **kwargs):
    if sys.argv[2] in args:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(args, cwd, **kwargs)
merge.run_git = mergebase.run_git = run_git
merge_node(open_context(Path(sys.argv[1])), "a")
"""


def _tree(base: Path) -> Path:
    repo = make_repo(base / "repo")
    init_tree(repo)
    init_node(open_context(repo), "a", {})
    wt = repo / ".worktrees" / "main.a"
    (wt / "work.txt").write_text("a\n")
    git(wt, "add", "work.txt")
    git(wt, "commit", "-q", "-m", "work")
    return repo


@pytest.mark.parametrize("command", ["write-tree", "commit-tree"])
def test_a_merge_killed_mid_way_leaves_nothing_behind_once_merged_again(
        tmp_path: Path, command: str) -> None:
    repo = _tree(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}
    env["TMPDIR"] = str(tmp)
    proc = subprocess.run([sys.executable, "-c", KILLED_AT, str(repo), command], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert sorted(p.name for p in tmp.iterdir()) == []
    scratch = repo / ".git" / "fractal-scratch"
    left = sorted(p.name for p in scratch.iterdir()) if scratch.is_dir() else []
    assert all(name.startswith("merge-") for name in left), left
    if command == "write-tree":  # killed with its scratch index written: left where swept
        assert left, "the killed merge's scratch index is expected in the git directory"
    assert "fractal-scratch" not in git(repo, "status", "--porcelain", "--ignored")
    assert merge_node(open_context(repo), "a").status == "merged"
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_the_sweep_removes_only_the_files_of_processes_that_are_gone(tmp_path: Path) -> None:
    from fractal.procs.procinfo import create_time
    from fractal.workspace.scratch import sweep_scratch

    created = create_time(os.getpid())
    assert created is not None
    mine = f"merge-{os.getpid()}-{round(created * 1000)}-x.index"
    names = [mine, f"merge-{os.getpid()}-{round(created * 1000) - 5000}-reused.index",
             "merge-999999999-1-dead.index", "merge-999999999-1-dead.index.lock",
             "merge-odd.index", "notes.txt"]
    for name in names:
        (tmp_path / name).write_text("")
    removed = sorted(p.name for p in sweep_scratch(tmp_path))
    assert removed == sorted([names[1], names[2], names[3]])  # dead, and a reused pid
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine, "merge-odd.index",
                                                                  "notes.txt"])
