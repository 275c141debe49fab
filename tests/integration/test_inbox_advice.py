"""What the inbox advises on a real tree (real SQLite, the real CLI as a subprocess): the
command shown is one that works in the tree's state (the brake on, an agent that fails
every time), and a paused item's reason is the newest interruption's."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import copy_of_tree, force_status, make_repo
from tests.trees import run_cli

NODE = "main.a1"


def _fractal(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cwd, check=False)


def _build(repo: Path) -> None:
    make_repo(repo)
    for args in (["init"], ["node", "init", "a1"]):
        assert _fractal(repo, *args).returncode == 0


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """``main`` with one idle child ``main.a1``, made by the CLI once per process."""
    yield copy_of_tree(tmp_path / "repo", "advice-a1", _build)
    close_engines()


def _ledger(repo: Path) -> Ledger:
    return Ledger(repo / ".fractal" / "main" / "fractal.db")


def _inbox(repo: Path, kind: str) -> list[dict[str, object]]:
    out = _fractal(repo, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    return [i for i in json.loads(out.stdout) if i["kind"] == kind]


def _park(ledger: Ledger, run: int, where: str) -> None:
    force_status(ledger.db_path, NODE, "paused")
    ledger.add_event(NODE, "pause", actor="loop", status="completed",
                     metadata=f"parked {where}", run_id=run)


def test_under_the_tree_brake_a_paused_node_is_resumed_by_fractal_resume(repo: Path) -> None:
    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    _park(ledger, run, "during PLAN")
    [item] = _inbox(repo, "paused")
    assert item["command"] == f"fractal node resume {NODE}"  # no brake: the node's own
    assert _fractal(repo, "pause", "--reason", "lunch").returncode == 0
    [item] = _inbox(repo, "paused")
    assert item["command"] == "fractal resume"
    assert str(item["summary"]).endswith(
        "the tree is braked (`fractal pause`): `fractal resume` lifts the brake and "
        "resumes every parked node")
    refused = _fractal(repo, "node", "resume", NODE)  # what the inbox used to advise
    assert refused.returncode == 1 and "`fractal resume` lifts the brake" in refused.stderr


def test_a_paused_item_drops_an_old_pauses_reason_after_a_newer_interruption(
        repo: Path) -> None:
    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, NODE, "active")
    ledger.signal_run(NODE, run, "pause", actor="operator", reason="lunch")
    _park(ledger, run, "during PREPARE")
    [item] = _inbox(repo, "paused")
    assert item["summary"] == "paused: lunch (during PREPARE)"
    ledger.add_event(NODE, "resume", actor="operator", status="completed", run_id=run)
    force_status(ledger.db_path, NODE, "active")
    _park(ledger, run, "interrupted: SIGINT")  # C-c in its pane, the same run
    [item] = _inbox(repo, "paused")
    assert item["summary"] == "paused: interrupted: SIGINT"
    details = item["details"]
    assert isinstance(details, dict) and details["asked"] == ""


def test_an_agent_that_failed_every_iteration_is_looked_at_before_continuing(
        repo: Path) -> None:
    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, "3 consecutive iterations failed (last: failed on PLAN)")
    force_status(ledger.db_path, NODE, "exited")
    [item] = _inbox(repo, "exited")
    assert item["command"] == f"fractal node activity {NODE}"
    assert f"then `fractal node start {NODE} --continue`" in str(item["summary"])
    text = _fractal(repo, "inbox").stdout
    assert f"-> fractal node activity {NODE}" in text


def test_the_dashboards_inbox_follows_the_brake_with_no_row_written(repo: Path) -> None:
    """The brake is a file, not a row: a dashboard that kept a paused node's facts still
    advises `fractal resume` once it is on, and the node's own resume once it is off."""
    from fractal.control import clear_latch, set_latch
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder

    tree = find_tree(repo)
    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    _park(ledger, run, "during PLAN")
    live = Builder(tree)

    def commands() -> list[str]:
        return [e.item.command for e in live.build().inbox if e.item.node == NODE]

    assert commands() == [f"fractal node resume {NODE}"]
    set_latch(tree, "lunch")
    assert commands() == ["fractal resume"]
    clear_latch(tree)
    assert commands() == [f"fractal node resume {NODE}"]
