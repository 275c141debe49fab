"""``fractal inbox`` on a real tree: rows written through the ledger, read by the CLI."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import force_status, git, make_repo
from tests.trees import run_cli


def _fractal(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), repo, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    repo = make_repo(tmp_path / "repo")
    for args in (["init"], ["node", "init", "ended"], ["node", "init", "parked"],
                 ["node", "init", "gated"], ["node", "init", "quiet"]):
        assert _fractal(repo, *args).returncode == 0
    yield repo
    close_engines()


def _items(repo: Path, *flags: str) -> list[dict[str, object]]:
    out = _fractal(repo, "inbox", "--json", *flags)
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    assert isinstance(items, list)
    return items


def test_inbox_lists_each_kind_oldest_first_and_ack_hides_it(repo: Path) -> None:
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.ended", agent="stub", max_cost=2.0, parent_run_id=None)
    step = ledger.open_step(node="main.ended", run_id=run, iter_id=None, step=1,
                            step_name="EXECUTE", agent="stub", model=None, session=None)
    ledger.close_step(step, "completed", 0, "", cost=0.5)
    ledger.close_run(run, "exited", 1, "Exited at iteration 1.1")
    force_status(ledger.db_path, "main.ended", "exited")

    parked = ledger.open_run("main.parked", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.parked", "paused")
    ledger.add_event("main.parked", "pause", actor="loop", status="completed",
                     metadata="parked before EXECUTE", run_id=parked)

    worktree = repo / ".worktrees" / "main.gated"
    (worktree / "work.txt").write_text("one\ntwo\n")
    git(worktree, "add", "work.txt")
    git(worktree, "commit", "-q", "-m", "work")
    gated = ledger.open_run("main.gated", agent="stub", max_cost=None, parent_run_id=None)
    gate = ledger.open_step(node="main.gated", run_id=gated, iter_id=None, step=2,
                            step_name="REVIEW", agent="stub", model=None, session=None,
                            gated=True)
    force_status(ledger.db_path, "main.gated", "active")

    items = _items(repo)
    assert [(i["kind"], i["node"]) for i in items] == [
        ("exited", "main.ended"), ("paused", "main.parked"), ("gate", "main.gated")]
    ended, paused, waiting = items
    assert ended["command"] == "fractal node start main.ended --continue"
    assert "spent $0.5000 of $2.0000" in str(ended["summary"])
    assert paused["command"] == "fractal node resume main.parked"
    assert waiting["command"] == f"fractal node approve main.gated {gate}"
    assert "1 file changed" in str(waiting["summary"])  # work.txt; the node dir stays out

    text = _fractal(repo, "inbox")
    assert f"-> fractal node approve main.gated {gate}" in text.stdout

    acked = _fractal(repo, "inbox", "ack", str(ended["id"]))
    assert acked.returncode == 0, acked.stderr
    assert [i["node"] for i in _items(repo)] == ["main.parked", "main.gated"]
    assert [i["acked"] for i in _items(repo, "--all")] == [True, False, False]

    again = ledger.open_run("main.ended", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(again, "exited", 1, "Exited at iteration 2.1")  # its state changed
    assert [i["node"] for i in _items(repo)] == ["main.parked", "main.gated", "main.ended"]

    unknown = _fractal(repo, "inbox", "ack", "deadbeef")
    assert unknown.returncode == 1
    assert "no inbox item 'deadbeef'" in unknown.stderr
