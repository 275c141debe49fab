"""``fractal destroy`` ends the tree's notify watcher before it removes the database, and
a watcher that finds the database gone exits instead of recreating it. Real processes,
real SQLite, the real CLI."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.lifecycle import notify
from fractal.procs.processes import marked_processes
from fractal.store.engine import close_engines
from fractal.tree import Tree
from fractal.workspace.nodedir import update_config
from tests.helpers import git, make_repo, wait_until
from tests.trees import run_cli


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    repo = make_repo(tmp_path / "repo")
    run_cli(["init"], repo)
    made = Tree(repo=repo, root="main")
    update_config(made.config_path, {"notify": "true"})
    yield made
    for proc in marked_processes(notify.watcher_marker(made)):  # a failed test's leftover
        proc.kill()
    close_engines()


def test_destroy_stops_the_watcher_and_nothing_recreates_the_database(
        tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRACTAL_NOTIFY_IDLE_S", "600")  # it would outlive the test
    assert notify.ensure_watcher(tree)
    wait_until(lambda: notify.watcher_running(tree), timeout=20, message="watcher up")
    [watcher] = marked_processes(notify.watcher_marker(tree))
    out = run_cli(["destroy", "--force"], tree.repo, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert not watcher.is_running() or watcher.status() == "zombie"
    assert marked_processes(notify.watcher_marker(tree)) == []
    assert not tree.data_dir.exists()
    assert ".fractal" not in git(tree.repo, "status", "--short")


def test_a_watcher_whose_database_is_gone_exits_without_recreating_it(tree: Tree) -> None:
    looks: list[float] = []

    def sleep(seconds: float) -> None:
        looks.append(seconds)
        if len(looks) == 2:
            close_engines()
            shutil.rmtree(tree.data_dir)  # as a destroy leaves it

    assert notify.watch(tree, sleep=sleep) == 0
    assert not tree.data_dir.exists() and len(looks) == 2
