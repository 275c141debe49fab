"""A node created under a deleted node's name starts with no trace of its namesake: the
inbox, ``node status`` and the dashboard read only the rows booked since it was
registered (issue 30, item 4)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fractal.store import reader
from fractal.store.dashboard import history
from fractal.store.ledger import Ledger
from tests.helpers import force_status, no_hold
from tests.trees import run_cli, run_cli_as


def _fractal(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cwd, check=False)


def _reborn(repo: Path) -> Ledger:
    """``main.a2.x`` ran and exited, was deleted, and a new ``x`` was made under ``a2``."""
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a2.x", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, "namesake's own reason")
    force_status(ledger.db_path, "main.a2.x", "exited")
    out = run_cli_as(repo, "node", "delete", "a2.x", "--force")
    assert out.returncode == 0, out.stderr
    out = _fractal(repo / ".worktrees" / "main.a2", "node", "init", "x")
    assert out.returncode == 0, out.stderr
    return ledger


def test_a_reborn_name_reads_as_never_started_everywhere(cousins: Path) -> None:
    ledger = _reborn(cousins)
    assert reader.last_run(ledger.db_path, "main.a2.x") is None
    assert ledger.last_run("main.a2.x") is None
    assert history(ledger.db_path, "main.a2.x").runs == []
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder

    view = Builder(find_tree(cousins)).build(now=2_000_000_000.0).node("main.a2.x")
    assert view is not None and (view.status, view.reason) == ("idle", "")
    status = _fractal(cousins, "node", "status", "a2.x")
    assert status.returncode == 0, status.stderr
    assert "namesake" not in status.stdout
    activity = _fractal(cousins, "node", "activity", "a2.x", "--json")
    assert activity.returncode == 0, activity.stderr
    rows = json.loads(activity.stdout)
    assert rows and "namesake" not in activity.stdout
    assert [r["event"] for r in rows if r["kind"] == "event"] == ["init"]
    out = _fractal(cousins, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    assert [i for i in json.loads(out.stdout) if i["node"] == "main.a2.x"] == []


def test_a_parent_waiting_on_a_reborn_idle_child_is_an_inbox_item(cousins: Path) -> None:
    ledger = _reborn(cousins)
    no_hold(cousins)
    run = ledger.open_run("main.a2", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2", "active")
    ledger.open_step(node="main.a2", run_id=run, iter_id=None, step=4, step_name="WAIT",
                     agent=None, model=None, session=None)
    out = _fractal(cousins, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    items = [i for i in json.loads(out.stdout) if i["kind"] == "unstarted"]
    assert [(i["node"], i["command"]) for i in items] == [
        ("main.a2", "fractal node start main.a2.x")]
    status = _fractal(cousins, "node", "status", "a2")
    assert status.returncode == 0, status.stderr
    assert "waiting for 1 child: x idle, never started" in status.stdout


def test_inbox_says_which_items_a_running_loop_holds(cousins: Path) -> None:
    """A waiting lead's idle child is the lead's first: the inbox lists nothing but says
    who holds what, and until when."""
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a2", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2", "active")
    ledger.open_step(node="main.a2", run_id=run, iter_id=None, step=4, step_name="WAIT",
                     agent=None, model=None, session=None)
    out = _fractal(cousins, "inbox")
    assert out.returncode == 0, out.stderr
    assert "unstarted main.a2" not in out.stdout
    assert ("1 item is with the loop that acts on it first (main.a2: unstarted main.a2.x); "
            "each reaches you after 10m unhandled") in out.stderr
