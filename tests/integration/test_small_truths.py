"""Smaller things a new user met (issue 30, item 8), each read through the real CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fractal.store.ledger import Ledger
from tests.helpers import force_status
from tests.trees import run_cli


def _fractal(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cwd, check=False)


def test_a_stop_reason_is_in_the_stopped_nodes_status(cousins: Path) -> None:
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a1", "active")
    ledger.signal_run("main.a1", run, "stop", actor="operator", reason="wrong approach")
    ledger.close_run(run, "stopped", 0, "Stopped by request")
    force_status(ledger.db_path, "main.a1", "stopped")
    out = _fractal(cousins, "node", "status", "a1")
    assert out.returncode == 0, out.stderr
    assert "Stopped by request: wrong approach" in out.stdout
    listing = _fractal(cousins, "node", "list")
    assert "Stopped by request: wrong approach" in listing.stdout


def test_the_tree_brakes_reason_is_in_a_parked_nodes_status_until_it_resumes(
        cousins: Path) -> None:
    """``fractal pause --reason``: each node it parked reads ``run N parked: <reason>`` in
    ``node status`` and ``node list``; a resume answers the ask, so a later park without
    one reads bare."""
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a1", "active")
    braked = _fractal(cousins, "pause", "--reason", "lunch")
    assert braked.returncode == 0, braked.stderr
    force_status(ledger.db_path, "main.a1", "paused")  # its loop parks the run
    ledger.add_event("main.a1", "pause", actor="loop", status="completed",
                     metadata="parked during EXECUTE", run_id=run)
    shown = f"paused (run {run} parked: lunch (via pause of main))"
    out = _fractal(cousins, "node", "status", "a1")
    assert out.returncode == 0, out.stderr
    assert shown in out.stdout
    listing = _fractal(cousins, "node", "list")
    assert listing.returncode == 0, listing.stderr
    assert f"run {run} parked: lunch (via pause of main)" in listing.stdout
    ledger.add_event("main.a1", "resume", actor="operator", status="completed", run_id=run)
    ledger.add_event("main.a1", "pause", actor="loop", status="completed",
                     metadata="parked during PLAN", run_id=run)
    out = _fractal(cousins, "node", "status", "a1")
    assert f"paused (run {run} parked)" in out.stdout and "lunch" not in out.stdout


def test_every_line_of_the_dashboard_help_fits_its_dialog() -> None:
    from fractal.tui.screens import HELP, HELP_WIDTH

    assert [line for line in HELP.splitlines() if len(line) > HELP_WIDTH] == []


def test_the_card_of_a_node_waiting_for_children_does_not_count_down_its_step_timeout() -> None:
    from fractal.domain.steps.waits import STEP_WALL_NOTE
    from fractal.domain.views.dashboard import Live
    from fractal.tui.render import card
    from fractal.tui.snapshot import NodeView

    now = 2_000_000_000.0

    def view(step_name: str) -> NodeView:
        return NodeView(branch="main.lead", status="active", title="", reason="", spent=None,
                        cap=None, gauge=None, stalled=False,
                        live=Live(3, 1, 5, 2, 4, step_name, now - 300),
                        config=(("step_timeout", '"20m"'),))

    assert f"step_timeout 20m ({STEP_WALL_NOTE})" in card(view("WAIT"), now).plain
    assert "step_timeout 20m (15m00s left)" in card(view("EXECUTE"), now).plain


def test_the_operators_own_pause_makes_no_item(cousins: Path) -> None:
    """``fractal node pause`` (or the brake) by the operator: the parked node is no inbox
    item within the grace, and the inbox says it held it back as the operator's own."""
    import json

    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a1", "active")
    ledger.signal_run("main.a1", run, "pause", actor="operator", reason="")
    force_status(ledger.db_path, "main.a1", "paused")
    ledger.add_event("main.a1", "pause", actor="loop", status="completed",
                     metadata="parked during EXECUTE", run_id=run)
    out = _fractal(cousins, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    assert [i for i in json.loads(out.stdout) if i["kind"] == "paused"] == []
    text = _fractal(cousins, "inbox")
    assert "your own action: paused main.a1" in text.stderr
    # A pause a node's loop asked for (the lead pausing its child) is no operator action.
    ledger.add_event("main.a1", "resume", actor="operator", status="completed", run_id=run)
    ledger.signal_run("main.a1", run, "pause", actor="main.a1", reason="")
    out = _fractal(cousins, "inbox", "--json")
    assert [i["node"] for i in json.loads(out.stdout) if i["kind"] == "paused"] == ["main.a1"]
