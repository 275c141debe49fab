"""The dispatcher's pure rules, table by table: reading a claimed item's worker
(``settle``), worker names and tasks, progress counts, the POOL prompt section, and the
run end a pool names."""

from __future__ import annotations

import pytest

from fractal.domain.outcome import RunEnd, RunFacts, Status, decide_run_end
from fractal.domain.pool import (
    Item,
    ItemStatus,
    Worker,
    WorkerFacts,
    parse_items,
    pool_document,
    progress,
    settle,
    worker_name,
    worker_task,
)

CLAIM = "2026-01-01T00:00:10.000Z"
BEFORE = "2026-01-01T00:00:05.000Z"
AFTER = "2026-01-01T00:00:20.000Z"


@pytest.mark.parametrize(("status", "ended", "run_status", "verdict"), [
    ("active", None, None, Worker.LIVE),  # its run is going
    ("paused", None, None, Worker.LIVE),  # parked: resumes with its pool
    ("active", AFTER, "completed", Worker.LIVE),  # a new run of it already started
    ("completed", AFTER, "completed", Worker.DONE),
    ("completed", CLAIM, "completed", Worker.DONE),  # ended the instant of the claim
    ("exited", AFTER, "exited", Worker.FAILED),
    ("stopped", AFTER, "stopped", Worker.FAILED),
    ("killed", AFTER, "killed", Worker.FAILED),
    ("completed", BEFORE, "completed", Worker.GONE),  # an older attempt's run: never started
    ("exited", BEFORE, "exited", Worker.GONE),
    ("idle", None, None, Worker.GONE),  # created, never started
    (None, None, None, Worker.GONE),  # no node at all
])
def test_settle(status: str | None, ended: str | None, run_status: str | None,
                verdict: Worker) -> None:
    assert settle(WorkerFacts(status, CLAIM, ended, run_status)) is verdict


def test_settle_without_a_claim_instant_is_gone() -> None:
    assert settle(WorkerFacts("completed", None, AFTER, "completed")) is Worker.GONE


@pytest.mark.parametrize(("item_id", "name"), [
    ("fix-readme", "fix_readme"), ("a_b", "a_b"), ("item-7", "item_7"), ("x1", "x1")])
def test_worker_name(item_id: str, name: str) -> None:
    assert worker_name(item_id) == name


def test_ids_one_worker_apart_are_refused() -> None:
    with pytest.raises(ValueError, match="unique id"):
        parse_items('[{"id": "a-b", "input": "1"}, {"id": "a_b", "input": "2"}]')


def test_worker_task_holds_the_brief_the_item_and_the_previous_attempt() -> None:
    item = Item("i3", "translate page 3", ItemStatus.CLAIMED, "main.p.i3", 2)
    text = worker_task("Translate the page.", "main.p", item, "rejected: too short")
    assert text.startswith("Translate the page.")
    assert "item `i3`" in text and "translate page 3" in text
    assert "`$FRACTAL_BIN pool result" in text and "`$FRACTAL_BIN commit`" in text
    assert "### Attempt 2" in text and "rejected: too short" in text
    assert "### Attempt" not in worker_task("B", "main.p", item)


def test_progress_counts() -> None:
    items = [Item(str(n), "x", s) for n, s in enumerate(
        [ItemStatus.DONE, ItemStatus.DONE, ItemStatus.FAILED, ItemStatus.CLAIMED,
         ItemStatus.OPEN])]
    assert progress(items) == (2, 1, 1, 5)
    assert progress([]) == (0, 0, 0, 0)


def test_pool_document_lists_every_item_and_the_review_command() -> None:
    items = [Item("a", "x", ItemStatus.DONE, "main.p.a", 1, "wrote a | b"),
             Item("b", "y", ItemStatus.FAILED, "main.p.b", 2, "exited: boom")]
    text = pool_document("main.p", items, review_done=True)
    assert "## Worker pool main.p" in text
    assert "| a | done | 1 | main.p.a | wrote a \\| b |" in text
    assert "| b | failed | 2 | main.p.b | exited: boom |" in text
    assert "`$FRACTAL_BIN pool reject ITEM --reason" in text
    assert "fractal pool reject" not in pool_document("main.p", items, review_done=False)


def _facts(**changes: object) -> RunFacts:
    base: dict[str, object] = dict(
        run_id=1, last_iter=2, max_iters=3, budget_reason=None, setup_aborted=False,
        setup_failures=0, finish_drained=False, timed_out=False, walls_label="",
        stopped=False, last_iter_ok=True,
        step_end=RunEnd(Status.COMPLETED, Status.COMPLETED, 0, "pool: 8 done, 1 failed"))
    base.update(changes)
    return RunFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "status", "reason"), [
    ({}, Status.COMPLETED, "pool: 8 done, 1 failed"),
    ({"last_iter": 3}, Status.COMPLETED, "pool: 8 done, 1 failed"),  # at max_iters too
    ({"last_iter_ok": False}, Status.COMPLETED, "pool: 8 done, 1 failed"),
    ({"stopped": True}, Status.STOPPED, "Stopped by request"),  # a stop outranks it
    ({"budget_reason": "Budget exhausted"}, Status.EXITED, "Budget exhausted"),
    ({"step_end": None}, Status.EXITED, "Exited at iteration 1.2"),
])
def test_a_pool_end_names_the_run_end(changes: dict[str, object], status: Status,
                                      reason: str) -> None:
    end = decide_run_end(_facts(**changes))
    assert (end.run_status, end.reason) == (status, reason)


@pytest.mark.parametrize(("counts", "plain"), [
    ((5, 1, 2, 9), " ■■■■■□□□ 6/9 items (1 failed, 2 working)"),
    ((9, 0, 0, 9), " ■■■■■■■■ 9/9 items"),
    ((0, 0, 3, 9), " □□□□□□□□ 0/9 items (3 working)"),
    ((0, 0, 0, 0), " "),
])
def test_the_dashboard_pool_bar(counts: tuple[int, int, int, int], plain: str) -> None:
    from fractal.tui.render import pool_bar

    assert pool_bar(*counts).plain == plain
