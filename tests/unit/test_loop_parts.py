"""The loop's smaller parts in-process: where a resume re-enters an iteration, the two
waits (an approval gate and a finish drain) on the fake clock, step discovery, and the
clock's conversions."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from fractal.domain.errors import StepFileError
from fractal.domain.states import Status
from fractal.runtime.adopt import AWAITING_APPROVAL, resume_position
from fractal.runtime.clock import SystemClock, monotonic_to_epoch, stamp
from fractal.runtime.gates import WaitEnd, await_approval, drain_children
from fractal.runtime.iteration import RunAbort, load_plans
from fractal.runtime.pane import PaneReporter
from fractal.runtime.steering import Steering
from fractal.runtime.stepbuild import session_key
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger
from fractal.store.rows import StepRow
from fractal.store.timefmt import to_epoch
from tests.loopfakes import FakeClock, LoopTree, loop_tree

__all__ = ["loop_tree"]


def _row(step: int, status: str, meta: str = "", approved: str | None = None,
         name: str = "X") -> StepRow:
    return StepRow(step_id=step * 10, node="main.n", iter_id=1, run_id=1, step=step,
                   step_name=name, agent=None, model=None, session=None, status=Status(status),
                   exit_code=0, cost=None, approved=approved, pgid=None, pgid_started=None,
                   meta=meta, started_at="", ended_at=None, input_tokens=None,
                   cached_input_tokens=None, output_tokens=None)




@pytest.mark.parametrize(("rows", "position", "gate"), [
    ([], 1, None),
    ([_row(1, "completed"), _row(2, "paused")], 2, None),  # re-run the interrupted step
    ([_row(1, "completed"), _row(2, "completed", name="SYNC"), _row(2, "paused")], 2, None),
    ([_row(1, "completed"), _row(2, "paused", AWAITING_APPROVAL, approved="")], 2, 20),  # wait again
    ([_row(1, "completed"), _row(2, "paused", AWAITING_APPROVAL, approved="2026-01-01")], 3, None),
    ([_row(1, "failed"), _row(1, "completed")], 2, None),  # a retry that succeeded
], ids=["nothing ran", "paused step", "SYNC never counts", "unapproved gate",
        "gate approved while parked", "retried"])
def test_where_a_resume_re_enters(rows: list[StepRow], position: int,
                                  gate: int | None) -> None:
    first, parked = resume_position(rows)
    assert first == position
    assert (parked.step_id if parked else None) == gate


def _gate(t: LoopTree) -> tuple[Ledger, Steering, Waker, int]:
    t.node("n", {"01-A.md": "a"})
    ledger = Ledger(t.db)
    run_id = ledger.open_run("main.n", agent=None, max_cost=None, parent_run_id=None)
    step_id = ledger.open_step(node="main.n", run_id=run_id, iter_id=None, step=1,
                               step_name="A", agent=None, model=None, session=None, gated=True)
    ledger.mark_awaiting_approval(step_id)  # its agent's turn is over: the loop marks it so
    return ledger, Steering(ledger, run_id), Waker(t.clock), step_id


def test_an_approval_wait_ends_at_its_deadline_running_a_sync_every_window(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    ledger, steering, waker, step_id = _gate(t)
    syncs: list[float] = []
    end = await_approval(ledger, step_id, steering=steering, waker=waker,
                         deadline=t.clock.monotonic() + 100, window=30.0,
                         sync=lambda: syncs.append(t.clock.elapsed()))
    assert end is WaitEnd.TIMED_OUT
    assert syncs == [30.0, 60.0, 90.0]
    assert t.clock.elapsed() == pytest.approx(100.0)
    assert max(t.clock.waited) <= 1.0  # it polls the database at least once a second


@pytest.mark.parametrize(("verb", "end"), [("approve", WaitEnd.RELEASED),
                                           ("stop", WaitEnd.STOPPED),
                                           ("finish", WaitEnd.FINISHED),
                                           ("pause", WaitEnd.PAUSED)])
def test_an_approval_wait_ends_on_the_verb(loop_tree: LoopTree, verb: str,
                                           end: WaitEnd) -> None:
    t = loop_tree
    ledger, steering, waker, step_id = _gate(t)
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.n'")
    t.clock.after(7.5, lambda: t.cli("node", verb, "n"))
    assert await_approval(ledger, step_id, steering=steering, waker=waker, deadline=None,
                          window=600.0, sync=None) is end
    assert 7.5 <= t.clock.elapsed() <= 8.5


def test_a_drain_waits_for_the_running_children_only(loop_tree: LoopTree) -> None:
    t = loop_tree
    ledger, steering, waker, _step = _gate(t)
    t.cli("node", "init", "kid", "--parent", "n")
    t.cli("node", "init", "idle", "--parent", "n")
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.n.kid'")
    t.clock.after(42, lambda: t.sql_write("UPDATE nodes SET status = 'completed' "
                                          "WHERE node = 'main.n.kid'"))
    assert drain_children(ledger, "main.n", steering=steering, waker=waker, deadline=None,
                          window=600.0, sync=None) is WaitEnd.RELEASED
    assert 42 <= t.clock.elapsed() <= 43
    # bounded by the run wall alone
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.n.kid'")
    assert drain_children(ledger, "main.n", steering=steering, waker=waker,
                          deadline=t.clock.monotonic() + 5, window=600.0,
                          sync=None) is WaitEnd.TIMED_OUT


def test_step_discovery(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "02-B.md").write_text("---\ntimeout: 1s\n---\nb\n")
    (steps / "01-A.md").write_text("a\n")
    (steps / "03-DIR.md").mkdir()  # not a regular file: ignored
    plans = load_plans(steps)
    assert [(p.file.position, p.file.name) for p in plans] == [(1, "A"), (2, "B")]
    assert plans[1].frontmatter.fields == {"timeout": "1s"}
    (steps / "04-BAD.md").write_bytes(b"\xff\n")
    with pytest.raises(RunAbort, match=r"04-BAD\.md is not valid UTF-8"):
        load_plans(steps)
    (steps / "04-BAD.md").unlink()
    (steps / "5-ODD.md").write_text("x")
    with pytest.raises(StepFileError):
        load_plans(steps)


def test_the_clock_converts_deadlines_and_stamps() -> None:
    fake = FakeClock()
    assert monotonic_to_epoch(fake, None) is None
    assert monotonic_to_epoch(fake, fake.monotonic() + 60) == pytest.approx(fake.time() + 60)
    fake.now += 3600
    assert to_epoch(stamp(fake)) == pytest.approx(fake.epoch0 + 3600, abs=0.001)
    real = SystemClock()
    epoch = monotonic_to_epoch(real, real.monotonic())
    assert epoch is not None and abs(epoch - real.time()) < 1.0
    assert PaneReporter(stream=io.StringIO())  # the pane needs no terminal


def test_sessions_are_kept_per_agent_setting(loop_tree: LoopTree) -> None:
    """A step's ``agent:`` override runs under its own session key; every other step
    shares the node's agent setting (two commands never share a session)."""
    t = loop_tree
    t.node("s", {"01-A.md": "a", "02-B.md": f"---\nagent: {t.agent} --other\n---\nb",
                 "03-C.md": "c"}, "--no-sync", "--max-iters", "1")
    t.run("s")
    a, b, c = t.launcher.calls
    assert a.env["FRACTAL_SESSION_ID"] == ""  # the first launch opens the node's session
    assert b.env["FRACTAL_SESSION_ID"] == ""  # the override opens its own
    assert c.env["FRACTAL_SESSION_ID"] != "" and c.env["FRACTAL_SESSION_ID"] != \
        b.env.get("FRACTAL_SESSION_ID")

    class _Boot:
        agent_setting = "claude"
    assert session_key(_Boot(), {}) == "claude"  # type: ignore[arg-type]
    assert session_key(_Boot(), {"agent": "codex"}) == "codex"  # type: ignore[arg-type]
