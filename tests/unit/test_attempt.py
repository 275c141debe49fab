"""One launch attempt in-process (``launch.run_attempt``): every ``Ending`` and every
``RowPolicy``, each a scripted agent under the fake clock, recorded on a real step row."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import pytest

from fractal.agents.base import LaunchRequest
from fractal.agents.command import CommandBackend
from fractal.domain.run.outcome import Status
from fractal.runtime.launch import Attempt, LaunchKit, RowPolicy, run_attempt
from fractal.runtime.pane import PaneReporter
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger
from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


@dataclass(frozen=True)
class Case:
    prompt: str
    outcome: tuple[object, ...]  # (status, exit_code, reason) of the attempt
    row: tuple[object, ...] | None  # (status, exit_code, metadata) of the row; None: open
    limit: float | None = None
    policy: RowPolicy = RowPolicy.CLOSE
    retry: bool = False
    pause_after: float | None = None  # fake seconds until a pause is asked for
    refuse: bool = False
    launched: bool = True
    seconds: float = 0.0  # fake seconds the attempt took


CASES: dict[str, Case] = {
    "exits 0": Case("[stub:cost=0.5]", ("completed", 0, ""), ("completed", 0, "")),
    "fails": Case("[stub:fail=3]", ("failed", 3, None), ("failed", 3, None)),
    "fails, priced": Case("[stub:cost=0.1] [stub:fail=3]", ("failed", 3, None),
                          ("failed", 3, None)),
    "fails on a retry": Case("[stub:fail=3]", ("failed", 3, None), ("failed", 3, None),
                             retry=True),
    "timed out": Case("[stub:hang]", ("exited", 124, "timed out; unpriced"),
                      ("exited", 124, "timed out; unpriced"), limit=5.0, seconds=5.0),
    "no time left": Case("[stub:hang]", ("exited", 124, "timed out"),
                         ("exited", 124, "timed out"), limit=0.0, launched=False),
    "cannot start": Case("x", ("failed", 127, "agent could not start: exec failed"),
                         ("failed", 127, "agent could not start: exec failed"), refuse=True,
                         launched=False),
    # a pause ends the group (TERM: 128 + 15) and parks the row open
    "paused": Case("[stub:hang]", ("paused", 143, ""), ("paused", 143, ""), pause_after=3.0,
                   seconds=3.0),
    "a pause outranks the deadline": Case("[stub:hang]", ("paused", 143, ""),
                                          ("paused", 143, ""), limit=3.0, pause_after=3.0,
                                          seconds=3.0),
    "lenient SYNC failure": Case("[stub:fail=4]", ("completed", 4, "sync failed (exit 4)"),
                                 ("completed", 4, "sync failed (exit 4)"),
                                 policy=RowPolicy.LENIENT),
    "held open": Case("ok", ("completed", 0, ""), None, policy=RowPolicy.HOLD_OPEN),
    "held open, failed": Case("[stub:fail=2]", ("failed", 2, None), ("failed", 2, None),
                              policy=RowPolicy.HOLD_OPEN),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_an_attempt_ends(loop_tree: LoopTree, name: str) -> None:
    case, t = CASES[name], loop_tree
    t.node("n", {"01-A.md": "a"})
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.n'")  # a run is on
    ledger = Ledger(t.db)
    run_id = ledger.open_run("main.n", agent=None, max_cost=None, parent_run_id=None)
    iter_id = ledger.open_iteration("main.n", run_id, 1, agent=None, model=None)
    worktree, ndir = t.worktree("n"), t.node_dir("n")
    asked_at = None if case.pause_after is None else t.clock.monotonic() + case.pause_after
    attempt = Attempt(
        node="main.n", run_id=run_id, iter_id=iter_id, step=1, step_name="A",
        backend=CommandBackend([str(t.agent)], worktree),
        request=LaunchRequest(prompt=case.prompt, worktree=worktree, node_dir=ndir),
        limit=case.limit, err_path=ndir / "command.err", err_snapshot=ndir / "tmp" / "a.err",
        retry=case.retry, row=case.policy,
        should_pause=None if asked_at is None else lambda: t.clock.monotonic() >= asked_at)
    t.launcher.refuse = "exec failed" if case.refuse else None
    kit = LaunchKit(ledger, PaneReporter(stream=io.StringIO()), Waker(t.clock), t.clock,
                    t.launcher)
    result = run_attempt(attempt, kit, lambda _sid: dict(os.environ))

    status, code, reason = case.outcome
    assert (result.outcome.status.value, result.outcome.exit_code) == (status, code)
    if reason is not None:
        assert result.outcome.reason == reason
    assert result.launched is case.launched
    assert result.seconds == pytest.approx(case.seconds)
    (row,) = t.sql("SELECT status, exit_code, metadata, ended_at, cost, approved FROM steps")
    if case.row is None:
        assert row[0] == "active" and row[3] is None
    else:
        assert row[0] == case.row[0] and row[1] == case.row[1]
        if case.row[2] is not None:
            assert row[2] == case.row[2]
        assert row[3] is not None  # closed (a paused row is parked: closed, resumable)
    assert (row[5] is not None) is (case.policy is RowPolicy.HOLD_OPEN)  # '' = awaiting
    if not case.launched:
        assert row[4] == 0.0 and t.launcher.calls == []
    if result.outcome.status is Status.FAILED and case.launched:
        # a failed attempt keeps its stderr, and a spend nobody recorded is named
        assert (ndir / "tmp" / "a.err").read_text().startswith("stub agent failing")
        assert result.outcome.reason.startswith("agent error (exit")
        if result.cost is None:
            assert result.outcome.reason.endswith("; retry; unpriced" if case.retry
                                                  else "; unpriced")
        else:
            assert "unpriced" not in result.outcome.reason


def test_a_teardown_mid_attempt_still_ends_the_group(loop_tree: LoopTree) -> None:
    """An exception while the agent runs (a signal arriving) stops its group first."""
    t = loop_tree
    t.node("n", {"01-A.md": "a"})
    ledger = Ledger(t.db)
    run_id = ledger.open_run("main.n", agent=None, max_cost=None, parent_run_id=None)

    class Teardown(BaseException):
        pass

    def interrupt() -> bool:
        raise Teardown
    worktree, ndir = t.worktree("n"), t.node_dir("n")
    attempt = Attempt(node="main.n", run_id=run_id, iter_id=None, step=1, step_name="A",
                      backend=CommandBackend([str(t.agent)], worktree),
                      request=LaunchRequest(prompt="[stub:hang]", worktree=worktree,
                                            node_dir=ndir),
                      limit=None, err_path=ndir / "command.err", err_snapshot=ndir / "x.err",
                      should_pause=interrupt)
    kit = LaunchKit(ledger, PaneReporter(stream=io.StringIO()), Waker(t.clock), t.clock,
                    t.launcher)
    with pytest.raises(Teardown):
        run_attempt(attempt, kit, lambda _sid: dict(os.environ))
    (call,) = t.launcher.calls
    assert call.stopped and call.returncode == -15
