"""The kept environment's file, for real: ``lifecycle/host.keep_env`` on a node of a
fresh tree (fresh start, restore, refresh, none kept yet), ``undo_env`` after a failed
launch, and the supervisor's ``load_launch_env`` reading it without removing it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from fractal.lifecycle.host import keep_env, undo_env
from fractal.lifecycle.trees import init_tree
from fractal.runtime.boot import load_launch_env
from fractal.tree import NodePaths, Tree
from fractal.workspace import runenv
from tests.helpers import make_repo

START = {"PATH": "/usr/bin", "KEY": "k-start", "ONLY_START": "1"}
OTHER = {"PATH": "/usr/bin", "KEY": "k-other", "ONLY_OTHER": "1"}


@pytest.fixture
def paths(tmp_path: Path) -> NodePaths:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    return Tree(repo=repo, root="main").node("main.n")


def test_a_fresh_start_keeps_the_callers_environment_privately(paths: NodePaths) -> None:
    kept = keep_env(paths, START, fresh=True, refresh=False)
    assert (kept.note, kept.wrote, kept.before) == ("", True, None)
    path = paths.run_env_path
    assert path == paths.tree.data_dir / "private" / "main.n" / "env.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert runenv.load(path) == START
    assert load_launch_env(path) == START and path.exists()  # read, left for the resume
    assert not path.is_relative_to(paths.worktree)


def test_a_relaunch_restores_and_a_refresh_replaces(paths: NodePaths) -> None:
    keep_env(paths, START, fresh=True, refresh=False)
    restored = keep_env(paths, OTHER, fresh=False, refresh=False)
    assert (restored.note, restored.wrote) == ("", False)
    assert runenv.load(paths.run_env_path) == START
    refreshed = keep_env(paths, OTHER, fresh=False, refresh=True)
    assert refreshed.note == ("main.n: environment refreshed from this shell: changed KEY; "
                              "added ONLY_OTHER; removed ONLY_START")
    assert runenv.load(paths.run_env_path) == OTHER
    undo_env(paths, refreshed)  # the launch failed: the kept one is back
    assert runenv.load(paths.run_env_path) == START


def test_a_run_that_kept_none_keeps_the_callers_from_now_on(paths: NodePaths) -> None:
    kept = keep_env(paths, OTHER, fresh=False, refresh=False)
    assert kept.note.startswith("main.n: no environment was kept for this run")
    assert runenv.load(paths.run_env_path) == OTHER
    undo_env(paths, kept)
    assert not paths.run_env_path.exists()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_an_unreadable_file_reads_as_none_kept(paths: NodePaths, content: str) -> None:
    paths.run_env_path.parent.mkdir(parents=True)
    paths.run_env_path.write_text(content)
    assert runenv.load(paths.run_env_path) is None
    kept = keep_env(paths, OTHER, fresh=False, refresh=False)
    assert "no environment was kept" in kept.note
    assert runenv.load(paths.run_env_path) == OTHER
