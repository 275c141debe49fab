"""What the inbox advises on a real tree (real SQLite, the real CLI as a subprocess): the
command shown is one that works in the tree's state (the brake on, an agent that fails
every time), and a paused item's reason is the newest interruption's. Also what the
terminal table of ``node activity`` shows after an early failure."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import copy_of_tree, force_status, make_repo, no_hold
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
    no_hold(repo)  # the operator's own pause: shown at once
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


def _on_a_terminal(repo: Path, *args: str) -> str:
    """``fractal ARGS`` with its stdout on a pseudo-terminal (the table view); its output."""
    import os
    import pty
    import sys

    main, child = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "fractal", *args], cwd=repo,
                              stdout=child, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              env={**os.environ, "COLUMNS": "250"}, timeout=60, check=False)
        os.close(child)
        child = -1
        chunks = []
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if child >= 0:
            os.close(child)
        os.close(main)
    assert proc.returncode == 0, proc.stderr
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_the_activity_table_shows_an_early_failures_skipped_steps_once(repo: Path) -> None:
    """PLAN failed, so the loop booked the eight steps after it as not run: the terminal
    table shows them as one row; the CSV export and the ledger keep every row."""
    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    it = ledger.open_iteration(NODE, run, 1, agent="stub", model=None)
    plan = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=1, step_name="PLAN",
                            agent="stub", model=None, session=None)
    ledger.close_step(plan, "failed", 2, "agent error (exit 2): boom")
    names = ["EXECUTE", "TEST", "REVIEW", "DOCS", "LINT", "BENCH", "NOTES", "COMMIT"]
    for n, name in enumerate(names, start=2):
        ledger.book_closed_step(node=NODE, run_id=run, iter_id=it, step=n, step_name=name,
                                status="stopped", exit_code=0, reason="failed on PLAN",
                                cost=0.0)
    shown = _on_a_terminal(repo, "node", "activity", NODE)
    lines = [line for line in shown.splitlines() if "failed on PLAN" in line]
    assert len(lines) == 1, shown
    assert "2 EXECUTE .. 9 COMMIT" in lines[0] and "failed on PLAN (x8)" in lines[0]
    assert "1 PLAN" in shown and "agent error (exit 2): boom" in shown
    csv = _fractal(repo, "node", "activity", NODE, "--csv").stdout
    assert csv.count("failed on PLAN") == 8 and csv.count(",step,start,") == 9


def test_a_failed_runs_item_and_status_name_the_failing_steps_reason(repo: Path) -> None:
    """The run's reason says how it ended; the cause is its newest failed step's reason,
    shown beside it (the run's reason stays as it was)."""
    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    it = ledger.open_iteration(NODE, run, 2, agent="stub", model=None)
    step = ledger.open_step(node=NODE, run_id=run, iter_id=it, step=2, step_name="EXECUTE",
                            agent="stub", model=None, session=None)
    ledger.close_step(step, "failed", 3, "agent error (exit 3): boom: cannot find module foo")
    ended = "Reached max iterations (2); final iteration failed"
    ledger.close_run(run, "exited", 1, ended)
    force_status(ledger.db_path, NODE, "exited")
    cause = "step EXECUTE failed: agent error (exit 3): boom: cannot find module foo"
    [item] = _inbox(repo, "exited")
    assert str(item["summary"]).startswith(f"run {run} exited: {ended} (spent unknown); "
                                           f"{cause}")
    details = item["details"]
    assert isinstance(details, dict) and details["reason"] == ended
    status = _fractal(repo, "node", "status", NODE)
    assert status.stdout.strip() == f"exited ({ended}; {cause})"


def test_a_gate_item_is_dated_when_the_gate_began_waiting(repo: Path) -> None:
    """The agent of a gated step worked for a while before its turn ended: the item's
    time is when the approval wait began, not when the step started."""
    import sqlite3

    ledger = _ledger(repo)
    run = ledger.open_run(NODE, agent="stub", max_cost=None, parent_run_id=None)
    gate = ledger.open_step(node=NODE, run_id=run, iter_id=None, step=2, step_name="REVIEW",
                            agent="stub", model=None, session=None, gated=True)
    force_status(ledger.db_path, NODE, "active")
    with sqlite3.connect(ledger.db_path) as conn:  # its agent started 21 s before
        conn.execute("UPDATE steps SET started_at = '2026-01-01T06:42:32.000Z' "
                     "WHERE step_id = ?", (gate,))
    ledger.mark_awaiting_approval(gate)
    with sqlite3.connect(ledger.db_path) as conn:
        (waiting,), = conn.execute("SELECT created_at FROM events WHERE event = 'gate' "
                                   "AND status = 'started' AND step_id = ?", (gate,))
    [item] = _inbox(repo, "gate")
    assert item["since"] == waiting != "2026-01-01T06:42:32.000Z"
