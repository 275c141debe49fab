"""Time walls in-process: the step limit (step_timeout, a step's ``timeout:``), the
iteration and run walls, a wall that leaves no time, pacing, and the parked time a resume
credits back, all on the fake clock: an hour of walls takes milliseconds."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]


@dataclass(frozen=True)
class Wall:
    steps: dict[str, str]
    opts: tuple[str, ...]
    rows: list[tuple[object, ...]]  # (step_name, status, exit_code, metadata)
    iteration: str  # the iteration row's metadata
    run: str  # the run row's metadata
    elapsed: tuple[float, float]  # fake seconds the run took, [low, high)


SLOW = {"01-SLOW.md": "[stub:sleep=30]"}
TWO = {"01-A.md": "[stub:sleep=2]", "02-B.md": "[stub:sleep=2]"}
FAILED = "Reached max iterations (1); final iteration failed"

WALLS: dict[str, Wall] = {
    "step_timeout": Wall(SLOW, ("--step-timeout", "1s"),
                         [("SLOW", "exited", 124, "timed out; unpriced")],
                         "SLOW timed out (1s)", FAILED, (1, 2)),
    "frontmatter timeout wins": Wall({"01-SLOW.md": "---\ntimeout: 2s\n---\n[stub:sleep=30]"},
                                     ("--step-timeout", "1h"),
                                     [("SLOW", "exited", 124, "timed out; unpriced")],
                                     "SLOW timed out (2s)", FAILED, (2, 3)),
    "SIGTERM ignored": Wall({"01-STUBBORN.md": "[stub:ignore-term] [stub:hang]"},
                            ("--step-timeout", "1s"),
                            [("STUBBORN", "exited", 124, "timed out; unpriced")],
                            "STUBBORN timed out (1s)", FAILED, (1, 2)),
    "iteration wall bounds the next step": Wall(
        TWO, ("--iter-timeout", "3s"),
        [("A", "completed", 0, ""), ("B", "exited", 124, "timed out; unpriced")],
        "B timed out (1s)", FAILED, (3, 4)),
    "a wall that leaves no time launches nothing": Wall(
        TWO, ("--iter-timeout", "2s"),
        [("A", "completed", 0, ""), ("B", "exited", 124, "timed out")],
        "timed out", FAILED, (2, 3)),
    "run wall mid-step": Wall(SLOW, ("--timeout", "5s"),
                              [("SLOW", "exited", 124, "timed out; unpriced")],
                              "SLOW timed out (5s)", "Timed out at iteration 1.1 (5s total)",
                              (5, 6)),
}


@pytest.mark.parametrize("case", list(WALLS), ids=list(WALLS))
def test_time_walls(loop_tree: LoopTree, case: str) -> None:
    wall, t = WALLS[case], loop_tree
    t.node("w", wall.steps, "--no-sync", "--max-iters", "1", *wall.opts)
    t.run("w")
    assert t.status("w") == "exited"
    assert t.steps("w") == wall.rows
    assert [r[3] for r in t.iterations("w")] == [wall.iteration]
    assert t.run_row("w") == ("exited", 1, wall.run)
    low, high = wall.elapsed
    assert low <= t.clock.elapsed() < high
    assert all(c.stopped for c in t.launcher.calls if c.returncode not in (0, None)
               and c.returncode < 0)


def test_frontmatter_with_bom_and_crlf_still_applies(loop_tree: LoopTree) -> None:
    t = loop_tree
    body = "\ufeff---\r\ntimeout: 1s\r\n---\r\n[stub:sleep=30]\r\n"
    t.node("bom", {"01-SLOW.md": body}, "--no-sync", "--max-iters", "1")
    t.run("bom")
    assert t.status("bom") == "exited"
    assert t.steps("bom") == [("SLOW", "exited", 124, "timed out; unpriced")]
    assert t.sql("SELECT metadata FROM iterations") == [("SLOW timed out (1s)",)]


@pytest.mark.parametrize(("opts", "gap"), [
    (("--sleep", "20s"), 20.0),  # sleep: a fixed gap after the last iteration ended
    (("--interval", "30s"), 27.0),  # interval: from the last start (the step took 3 s)
])
def test_pacing_between_iterations(loop_tree: LoopTree, opts: tuple[str, ...],
                                   gap: float) -> None:
    t = loop_tree
    t.node("paced", {"01-A.md": "[stub:sleep=3]"}, "--no-sync", "--max-iters", "2", *opts)
    t.run("paced")
    assert t.status("paced") == "completed"
    first, second = t.launcher.calls
    assert first.ended_at is not None
    assert second.started_at - first.ended_at == pytest.approx(gap, abs=0.01)


def test_a_stop_cuts_the_pacing_sleep_short(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("paced", {"01-A.md": "a"}, "--no-sync", "--max-iters", "5", "--sleep", "1h")
    t.clock.after(60, lambda: t.cli("node", "stop", "paced"))
    t.run("paced")
    assert t.run_row("paced") == ("stopped", 0, "Stopped by request")
    assert len(t.launcher.calls) == 1
    assert t.clock.elapsed() < 120  # not the hour


def test_the_iteration_wall_is_credited_the_parked_time(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("credit", {"01-A.md": "[stub:sleep=30]", "02-B.md": "b"}, "--no-sync",
           "--max-iters", "1", "--iter-timeout", "1m")

    def pause_once(call: FakeCall) -> None:
        if len(t.launcher.calls) == 1:
            t.clock.after(10, lambda: t.cli("node", "pause", "credit"))
    t.launcher.on_spawn.append(pause_once)
    t.run("credit")
    assert t.status("credit") == "paused"
    t.run("credit", resume=True, parked_for=600)
    # 10 s ran before the park: 50 s of the wall remain, so A (30 s) and B both run
    assert t.run_row("credit") == ("completed", 0, "Reached max iterations (1)")
    first, again, last = t.launcher.calls
    credit = int(again.env["ITER_END_EPOCH"]) - int(first.env["ITER_END_EPOCH"])
    assert 590 <= credit <= 610
    assert last.env["STEP_LABEL"] == "step 2 of 2 (B)"
