"""Done and merged are visible (issue 30, item 7): a top-level node's completed run is an
inbox item, and once merged, ``node status``, ``node list`` and the dashboard say so
until the node runs again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fractal.store.ledger import Ledger
from tests.helpers import force_status, git
from tests.trees import run_cli, run_cli_as


def _fractal(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cwd, check=False)


def _items(repo: Path) -> list[dict[str, object]]:
    out = _fractal(repo, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    assert isinstance(items, list)
    return items


def _list_detail(repo: Path, node: str) -> str:
    out = _fractal(repo, "node", "list", "--json")
    assert out.returncode == 0, out.stderr
    return str(next(r["detail"] for r in json.loads(out.stdout) if r["node"] == node))


def test_a_completed_top_level_node_is_ready_then_reads_merged_until_it_runs(
        cousins: Path) -> None:
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder

    a1 = cousins / ".worktrees" / "main.a1"
    (a1 / "work.txt").write_text("a1\n")
    git(a1, "add", "work.txt")
    git(a1, "commit", "-q", "-m", "a1 work")
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "completed", 0, "Reached max iterations (1)")
    force_status(ledger.db_path, "main.a1", "completed")

    ready = [i for i in _items(cousins) if i["kind"] == "ready"]
    assert [(i["node"], i["command"]) for i in ready] == [("main.a1", "fractal node merge main.a1")]
    assert "ready to merge into main" in str(ready[0]["summary"])
    assert "`fractal node diff main.a1`" in str(ready[0]["summary"])
    assert [i for i in _items(cousins) if i["kind"] == "ready" and i["node"] == "main.a2"] == []

    out = run_cli_as(cousins, "node", "merge", "a1")
    assert out.returncode == 0, out.stderr
    sha = git(cousins, "rev-parse", "--short=7", "main")
    shown = f"merged into main ({sha})"
    assert [i for i in _items(cousins) if i["kind"] == "ready"] == []
    status = _fractal(cousins, "node", "status", "a1")
    assert status.returncode == 0 and shown in status.stdout, status.stdout
    assert _list_detail(cousins, "main.a1").startswith(shown)
    view = Builder(find_tree(cousins)).build(now=2_000_000_000.0).node("main.a1")
    assert view is not None and view.reason == shown

    again = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(again, "completed", 0, "Reached max iterations (2)")
    assert "merged into" not in _list_detail(cousins, "main.a1")
    view = Builder(find_tree(cousins)).build(now=2_000_000_000.0).node("main.a1")
    assert view is not None and view.reason == "Reached max iterations (2)"
