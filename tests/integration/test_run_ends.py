"""runtime/ends.py on a real SQLite ledger: a finish names its unapproved gates, and a
run's end posts a notice naming the descendants still running."""

from __future__ import annotations

from pathlib import Path

from fractal.runtime.ends import finish_reason, notify_unsettled
from fractal.store.ledger import Ledger


def _ledger(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "fractal.db")
    for node, status in (("main.lead", "active"), ("main.lead.div", "active"),
                         ("main.lead.mul", "completed"), ("main.other", "active")):
        ledger.register_node(node, parent=None, title=None, worktree=None, status=status)
    return ledger


def test_a_finish_over_a_waiting_gate_says_so(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    run = ledger.open_run("main.lead", agent=None, max_cost=None, parent_run_id=None)
    it = ledger.open_iteration("main.lead", run, 1, agent=None, model=None)
    gate = ledger.open_step(node="main.lead", run_id=run, iter_id=it, step=2,
                            step_name="EXECUTE", agent=None, model=None, session=None,
                            gated=True)
    ledger.close_step(gate, "stopped", 0, "Finish requested while awaiting approval")
    assert finish_reason(ledger, "main.lead", run, "Finished by request") == \
        "Finished by request; EXECUTE never approved"
    ledger.approve_step(gate)
    assert finish_reason(ledger, "main.lead", run, "Finished by request") == \
        "Finished by request"


def test_the_end_notice_names_descendants_still_running(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    run = ledger.open_run("main.lead.div", agent=None, max_cost=None, parent_run_id=None)
    gate = ledger.open_step(node="main.lead.div", run_id=run, iter_id=None, step=2,
                            step_name="EXECUTE", agent=None, model=None, session=None,
                            gated=True)
    ledger.mark_awaiting_approval(gate)  # its agent's turn is over: the loop marks it so
    notice = notify_unsettled(ledger, "main.lead")
    assert notice == "ended with 1 child still running: main.lead.div awaiting approval"
    [posted] = ledger.messages("main.lead")
    assert posted.subject == notice
    assert notify_unsettled(ledger, "main.lead.mul") is None
