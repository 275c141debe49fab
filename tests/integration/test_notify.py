"""The ``notify`` command (fractal/lifecycle/notify.py) on a real tree: a real hook
process, real rows; at most once per event, one batch per burst, no credentials, a
time wall, failures recorded and not retried."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fractal.lifecycle import notify
from fractal.lifecycle.context import open_context
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from fractal.workspace.nodedir import update_config
from tests.helpers import force_status, make_repo
from tests.trees import run_cli


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    repo = make_repo(tmp_path / "repo")
    run_cli(["init"], repo)
    made = Tree(repo=repo, root="main")
    ledger = Ledger(made.db_path)
    for branch in ("main.a", "main.b"):  # registry rows are all the inbox reads here
        ledger.register_node(branch, parent="main", title=None, worktree=None)
    yield made
    close_engines()


def _exit(tree: Tree, branch: str, reason: str = "Exited at iteration 1.1") -> None:
    ledger = Ledger(tree.db_path)
    run = ledger.open_run(branch, agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, reason)
    force_status(ledger.db_path, branch, "exited")


def _hook(tree: Tree, tmp_path: Path, body: str = "") -> Path:
    out = tmp_path / "calls"
    out.mkdir()
    script = tmp_path / "hook.sh"
    script.write_text("#!/bin/sh\nn=$(ls \"$OUT\" | wc -l)\ncat > \"$OUT/$n.json\"\n"
                      "env > \"$OUT/$n.env\"\n" + body)
    script.chmod(0o755)
    update_config(tree.config_path, {"notify": f"OUT={out} {script}"})
    return out


def _rows(tree: Tree) -> list[tuple[object, ...]]:
    import sqlite3

    with sqlite3.connect(tree.db_path) as con:
        return list(con.execute("SELECT node, kind, status, exit_code, metadata FROM "
                                "notifications ORDER BY notification_id"))


def test_a_burst_is_one_run_each_event_once_without_credentials(tree: Tree,
                                                                tmp_path: Path) -> None:
    out = _hook(tree, tmp_path)
    _exit(tree, "main.a")
    _exit(tree, "main.b")
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-secret", "GH_TOKEN": "ghp-secret"}
    delivery = notify.dispatch(tree, env=env)
    assert delivery is not None and delivery.status == "completed"
    assert delivery.count == 2
    payload = json.loads((out / "0.json").read_text())
    assert [e["node"] for e in payload["events"]] == ["main.a", "main.b"]
    seen = (out / "0.env").read_text()
    assert "FRACTAL_EVENT_COUNT=2" in seen
    assert "FRACTAL_EVENT_KINDS=exited" in seen
    assert "secret" not in seen
    assert notify.dispatch(tree, env=env) is None  # nothing new: not notified twice
    _exit(tree, "main.a", "Exited at iteration 2.1")  # a new run ended: a new event
    again = notify.dispatch(tree, env=env)
    assert again is not None and again.count == 1
    assert len(list(out.glob("*.json"))) == 2
    assert [r[2] for r in _rows(tree)] == ["completed", "completed", "completed"]


def test_notify_events_filters_and_failures_are_recorded_once(tree: Tree,
                                                              tmp_path: Path) -> None:
    out = _hook(tree, tmp_path, "exit 3\n")
    update_config(tree.config_path, {"notify_events": ["gate"]})
    _exit(tree, "main.a")
    assert notify.dispatch(tree) is None  # an exited run is not a wanted kind
    assert [r[2] for r in _rows(tree)] == ["skipped"]
    update_config(tree.config_path, {"notify_events": None})
    _exit(tree, "main.b")
    failed = notify.dispatch(tree)
    assert failed is not None and failed.status == "failed" and failed.exit_code == 3
    assert notify.dispatch(tree) is None  # not retried
    assert ("main.b", "exited", "failed", 3, "exit 3") in _rows(tree)
    assert "failed: exit 3" in (tree.data_dir / "notify.log").read_text()
    assert len(list(out.glob("*.json"))) == 1


def test_a_hung_hook_hits_its_time_wall(tree: Tree, tmp_path: Path) -> None:
    _hook(tree, tmp_path, "sleep 60 &\nexec sleep 60\n")
    _exit(tree, "main.a")
    delivery = notify.dispatch(tree, timeout=0.5)
    assert delivery is not None and delivery.status == "failed"
    assert delivery.reason == "timed out after 0.5s"


def test_the_watcher_delivers_then_exits_when_the_tree_is_idle(tree: Tree,
                                                               tmp_path: Path) -> None:
    out = _hook(tree, tmp_path)
    _exit(tree, "main.a")
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    assert not notify.watcher_running(tree)
    assert notify.watch(tree, clock=lambda: clock[0], sleep=sleep) == 1
    assert clock[0] >= max(notify.IDLE_EXIT_S, notify.BOOT_GRACE_S)
    assert len(list(out.glob("*.json"))) == 1
    assert not notify.watcher_running(tree)


def test_inbox_notify_sets_and_clears_the_root_keys(tree: Tree) -> None:
    from fractal.errors import FractalError

    setting = notify.configure(open_context(tree.repo), "echo hi", "gate, budget")
    assert (setting.command, setting.events) == ("echo hi", "gate, budget")
    assert notify.notify_command(tree) == "echo hi"
    with pytest.raises(FractalError, match="unknown kind 'nope'"):
        notify.configure(open_context(tree.repo), None, "gate,nope")
    cleared = notify.configure(open_context(tree.repo), None, None, off=True)
    assert (cleared.command, cleared.events) == (None, None)
    assert notify.ensure_watcher(tree) is False  # nothing to run


def test_only_the_operator_sets_the_notify_command_or_acks(tree: Tree,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's loop must not install a command the watcher runs as the operator, nor
    hide the operator's inbox items."""
    from fractal.errors import FractalError
    from fractal.lifecycle.inbox import ack
    from fractal.lifecycle.notify import configure

    node_dir = tree.repo / ".worktrees" / "main.a" / ".fractal" / "main.a"
    node_dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("_NODE", str(node_dir))
    with pytest.raises(FractalError, match="operator's"):
        configure(open_context(tree.repo), "touch /tmp/owned", None)
    with pytest.raises(FractalError, match="operator's"):
        ack(open_context(tree.repo), "whatever")
    monkeypatch.delenv("_NODE")
    assert configure(open_context(tree.repo), None, None).command is None  # reading stays open


def test_nothing_a_hook_leaves_in_the_background_keeps_running(tree: Tree,
                                                                tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    _hook(tree, tmp_path, f"(trap '' TERM; sleep 60) &\necho $! > {pidfile}\nexit 0\n")
    _exit(tree, "main.a")
    delivery = notify.dispatch(tree, timeout=5)
    assert delivery is not None and delivery.status == "completed"
    child = int(pidfile.read_text())
    try:  # stopped (KILL after its TERM was ignored); a zombie awaits only its reaper
        state = psutil.Process(child).status()
    except psutil.NoSuchProcess:
        state = "gone"
    assert state in ("gone", psutil.STATUS_ZOMBIE)
