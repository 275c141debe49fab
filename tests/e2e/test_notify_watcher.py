"""The notify watcher end to end: ``node start`` brings it up, the run's exit reaches the
hook once, without the API keys of the starting shell."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fractal.lifecycle import notify
from fractal.tree import Tree as FractalTree
from tests.e2e.conftest import Tree
from tests.helpers import recording_hook, wait_until

pytestmark = pytest.mark.e2e


def test_a_run_that_exits_is_notified_once(tree: Tree, tmp_path: Path) -> None:
    hook, out = recording_hook(tmp_path)
    tree.cli("inbox", "notify", str(hook), "--events", "exited,budget")
    tree.node("fails", {"01-A.md": "[stub:fail=3]"}, "--no-sync", "--max-iters", "1",
              "--step-retry-backoff", "1s")  # the one retry at once
    env = {**os.environ, "SOME_API_KEY": "sk-never-seen", "FRACTAL_NOTIFY_IDLE_S": "1",
           "FRACTAL_NOTIFY_BOOT_GRACE_S": "5"}  # the node is active from its start verb on
    tree.cli("node", "start", "fails", env=env)
    assert tree.wait_settled("fails") == "exited"
    wait_until(lambda: list(out.glob("*.env")), timeout=30, message="the hook ran")  # written last
    (call,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert [(e["kind"], e["node"]) for e in call["events"]] == [("exited", "main.fails")]
    assert "sk-never-seen" not in next(out.glob("*.env")).read_text()
    wait_until(lambda: tree.sql("SELECT kind, status FROM notifications") == [
        ("exited", "completed")], timeout=15, message="the delivery recorded")
    watched = FractalTree(repo=tree.repo, root="main")
    wait_until(lambda: not notify.watcher_running(watched), timeout=60,
               message="the watcher exits once the tree is idle")
