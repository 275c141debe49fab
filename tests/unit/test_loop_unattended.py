"""Left alone: a supervisor that loses its host parks its run (nothing committed) and a
resume continues it in the same run and iteration; failing iterations in a row end the
run. In-process, with the fake clock and the scripted launcher."""

from __future__ import annotations

import re
import signal
from typing import Any

import pytest

from fractal.runtime.boot import Interrupted
from tests.helpers import git
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]


def _hangup_during(t: LoopTree, label: str, signum: int = signal.SIGHUP) -> None:
    """The host goes away (the signal handler raises) when step ``label`` starts, once."""
    def hang_up() -> None:
        raise Interrupted(signum)
    t.during(label, hang_up)


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGHUP, "SIGHUP"),
                                               (signal.SIGTERM, "SIGTERM")])
def test_a_lost_host_parks_the_run_and_commits_nothing(loop_tree: LoopTree, signum: int,
                                                       name: str) -> None:
    t = loop_tree
    t.node("n", {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"},
           "--no-sync", "--max-iters", "1")
    before = git(t.repo, "rev-parse", "main.n")
    (t.worktree("n") / "half.txt").write_text("in progress\n")
    _hangup_during(t, "(B)", signum)
    assert t.run("n") == 128 + signum
    assert t.status("n") == "paused"
    assert t.steps("n") == [("A", "completed", 0, ""),
                            ("B", "paused", 128 + signum, f"interrupted: {name}")]
    assert t.sql("SELECT status, ended_at FROM runs") == [("active", None)]
    assert t.sql("SELECT status, ended_at FROM iterations") == [("active", None)]
    assert git(t.repo, "rev-parse", "main.n") == before  # nothing committed
    assert t.sql("SELECT subject FROM messages WHERE node = 'main.n'") == [
        (f"run 1 parked: interrupted: {name}",)]
    assert "paused" in t.cli("node", "status", "n").output

    assert t.run("n", resume=True) == 0  # the same run and iteration, B re-entered
    assert t.run_row("n") == ("completed", 0, "Reached max iterations (1)")
    assert t.iterations("n") == [(1, "completed", 0, "")]
    assert [s[:2] for s in t.steps("n")] == [("A", "completed"), ("B", "paused"),
                                            ("B", "completed")]
    assert git(t.repo, "show", "main.n:b.txt") == "b"
    assert git(t.repo, "show", "main.n:half.txt") == "in progress"


def test_a_lost_host_at_an_approval_gate_keeps_it_unapproved(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("g", {"01-GATE.md": "---\nrequires_approval: true\n---\n[stub:write=g.txt:g]",
                 "02-NEXT.md": "[stub:write=n.txt:n]"}, "--no-sync", "--max-iters", "1")
    before = git(t.repo, "rev-parse", "main.g")

    def hangup_at_the_gate() -> None:
        raise Interrupted(signal.SIGHUP)
    t.launcher.on_spawn.append(lambda call: t.clock.after(30, hangup_at_the_gate)
                               if "(GATE)" in call.label and not t.sql(
                                   "SELECT 1 FROM steps WHERE status = 'paused'") else None)
    assert t.run("g") == 128 + signal.SIGHUP
    assert t.status("g") == "paused"
    assert t.steps("g") == [("GATE", "paused", 0, "awaiting approval; interrupted: SIGHUP")]
    assert git(t.repo, "rev-parse", "main.g") == before  # the gate's work is not committed
    assert t.sql("SELECT status FROM runs") == [("active",)]
    assert t.cli("node", "status", "g").output.strip() == "paused (interrupted: SIGHUP)"

    t.clock.after(30, lambda: t.cli("node", "approve", "g"))
    assert t.run("g", resume=True) == 0  # waits at the gate again, the agent not rerun
    assert [c.label for c in t.launcher.work_calls()].count("step 1 of 2 (GATE)") == 1
    assert t.run_row("g") == ("completed", 0, "Reached max iterations (1)")
    assert t.iterations("g") == [(1, "completed", 0, "")]


def test_max_failed_iters_ends_a_failing_run(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("f", {"01-A.md": "[stub:fail=3]"}, "--no-sync", "--step-retries", "0")
    assert t.run("f") == 0
    assert t.status("f") == "exited"
    status, code, reason = t.run_row("f")
    assert (status, code) == ("exited", 1)
    assert reason.startswith("3 consecutive iterations failed (last: failed on A")
    assert [i[1] for i in t.iterations("f")] == ["failed"] * 3


def test_a_success_restarts_the_failed_count(loop_tree: LoopTree) -> None:
    t = loop_tree
    # fail-first=2: two failed iterations, then the step passes for good.
    t.node("r", {"01-A.md": "[stub:fail-first=2]"}, "--no-sync", "--step-retries", "0",
           "--max-iters", "4")
    t.set_config("r", max_failed_iters=3)
    t.run("r")
    assert [i[1] for i in t.iterations("r")] == ["failed", "failed", "completed", "completed"]
    assert t.run_row("r") == ("completed", 0, "Reached max iterations (4)")


def test_max_failed_iters_null_is_off(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("o", {"01-A.md": "[stub:fail=2]"}, "--no-sync", "--step-retries", "0",
           "--max-iters", "5")
    t.set_config("o", max_failed_iters=None)
    t.run("o")
    assert [i[1] for i in t.iterations("o")] == ["failed"] * 5
    assert t.run_row("o") == ("exited", 1, "Reached max iterations (5); final iteration failed")


def test_a_park_does_not_restart_the_failed_count(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("p", {"01-A.md": "[stub:fail=1]"}, "--no-sync", "--step-retries", "0")
    _hangup_during_nth(t, 3)  # the third iteration's step: after two failures
    t.run("p")
    assert t.status("p") == "paused"
    t.run("p", resume=True)
    assert [i[1] for i in t.iterations("p")] == ["failed"] * 3
    assert t.run_row("p")[2].startswith("3 consecutive iterations failed")


def _hangup_during_nth(t: LoopTree, nth: int) -> None:
    def hook(call: FakeCall) -> None:
        if len(t.launcher.work_calls()) == nth:
            raise Interrupted(signal.SIGHUP)
    t.launcher.on_spawn.append(hook)


def test_the_interrupted_step_is_reentered_with_its_session(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("s", {"01-A.md": "[stub:write=a.txt:a] [stub:hang-unless=/nonexistent/x]"},
           "--no-sync", "--max-iters", "1")

    def hangup() -> None:
        raise Interrupted(signal.SIGHUP)
    t.launcher.on_spawn.append(lambda call: t.clock.after(10, hangup)
                               if len(t.launcher.work_calls()) == 1 else None)
    t.run("s")
    ((session,),) = t.sql("SELECT session FROM steps")
    assert session and t.status("s") == "paused"
    (t.node_dir("s") / "steps" / "01-A.md").write_text("[stub:write=a.txt:done]")
    assert t.run("s", resume=True) == 0
    first, again = t.launcher.work_calls()
    assert first.env["FRACTAL_SESSION_ID"] == ""
    assert again.env["FRACTAL_SESSION_ID"] == session  # the same agent session, resumed
    assert t.run_row("s") == ("completed", 0, "Reached max iterations (1)")


# -- usage windows -------------------------------------------------------------------------

def test_a_closed_usage_window_is_waited_out_and_the_step_reentered(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("u", {"01-A.md": "[stub:cost=0.1] [stub:limit-first=1] [stub:write=a.txt:a]"},
           "--no-sync", "--max-iters", "1", "--timeout", "1m")
    seen: list[str] = []
    before = git(t.repo, "rev-parse", "main.u")
    during: list[object] = []
    t.clock.after(60, lambda: seen.append(t.cli("node", "status", "u").output.strip()))
    t.clock.after(60, lambda: during.extend([
        git(t.repo, "rev-parse", "main.u"),
        t.sql("SELECT COUNT(*) FROM runs WHERE ended_at IS NULL"),
        t.sql("SELECT COUNT(*) FROM iterations WHERE ended_at IS NULL")]))
    assert t.run("u") == 0
    assert seen and seen[0].startswith("active (waiting for usage window until ")
    assert during == [before, [(1,)], [(1,)]]  # nothing committed, run and iteration open
    (a, b) = t.steps("u")
    assert a[:2] == ("A", "paused") and a[3].startswith("usage limit (five_hour) until 20")
    assert b[:3] == ("A", "completed", 0)
    assert t.sql("SELECT cost FROM steps ORDER BY step_id") == [(0.1,), (0.1,)]  # spend kept
    # no retry spent, not an iteration, and the 1 min run wall did not count the wait
    assert t.iterations("u") == [(1, "completed", 0, "")]
    assert t.run_row("u") == ("completed", 0, "Reached max iterations (1)")
    first, again = t.launcher.work_calls()
    assert again.started_at - first.started_at >= 120
    assert again.env["FRACTAL_SESSION_ID"] != ""  # the same session, resumed
    subjects = [s for (s,) in t.sql("SELECT subject FROM messages WHERE node = 'main.u' "
                                    "ORDER BY rowid")]
    assert subjects[0].startswith("waiting for usage window until ")
    assert subjects[1] == "usage window reopened (five_hour)"


def test_one_usage_wait_posts_one_wait_and_one_reopening(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("w", {"01-A.md": "[stub:limit-first=1] [stub:write=a.txt:a]"}, "--max-iters", "1")
    assert t.run("w") == 0  # SYNC on: the re-entered step looks at the window first
    subjects = [s for (s,) in t.sql("SELECT subject FROM messages WHERE node = 'main.w' "
                                    "AND subject LIKE '%usage window%' ORDER BY rowid")]
    assert len(subjects) == 2, subjects
    assert re.fullmatch(r"waiting for usage window until \d\d:\d\d:\d\dZ \(five_hour\)",
                        subjects[0]), subjects[0]  # to the second
    assert subjects[1] == "usage window reopened (five_hour)"
    waits = t.sql("SELECT status FROM events WHERE node = 'main.w' AND event = 'usage_wait'")
    assert waits == [("started",), ("completed",)]


def test_on_usage_limit_stop_ends_the_run_stopped(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("s", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "3")
    t.set_config("s", on_usage_limit="stop")
    t.run("s")
    status, code, reason = t.run_row("s")
    assert (status, code) == ("stopped", 0) and reason.startswith("usage limit (five_hour)")
    assert t.status("s") == "stopped"
    # the limited step closes with the run, never `paused` inside a closed run
    ((step, status, code, why),) = t.steps("s")
    assert (step, status, code, why) == ("A", "stopped", 0, reason)
    assert t.iterations("s") == [(1, "stopped", 0, reason)]
    assert t.sql("SELECT COUNT(*) FROM usage_windows") == [(0,)]  # nobody else is told


def test_on_usage_limit_stop_before_a_launch_ends_the_run_stopped(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.run("a")  # leaves the credential's row
    t.node("b", {"01-A.md": "b"}, "--no-sync", "--max-iters", "2")
    t.set_config("b", on_usage_limit="stop")
    _close_as_another_node(t, 300)
    calls = len(t.launcher.calls)
    t.run("b")
    assert len(t.launcher.calls) == calls  # it never called the API
    status, code, reason = t.run_row("b")
    assert (status, code) == ("stopped", 0) and reason.startswith("usage limit (five_hour)")
    assert t.sql("SELECT COUNT(*) FROM steps WHERE node = 'main.b' AND status = 'paused'") \
        == [(0,)]


def test_past_max_usage_wait_the_run_exits(loop_tree: LoopTree) -> None:
    """No reset stated: the wait backs off (60 s) and probes; the probe hits the window
    again, and once the wait has lasted max_usage_wait the run exits."""
    t = loop_tree
    t.node("m", {"01-A.md": "[stub:limit-unstated-first=9]"}, "--no-sync", "--max-iters", "3")
    t.set_config("m", max_usage_wait="1m")
    t.run("m")
    assert t.run_row("m") == ("exited", 1, "usage window did not reopen within 1m")
    assert t.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]
    # the limited step closes with the run: no `paused` row inside a closed run
    assert t.steps("m")[-1] == ("A", "stopped", 0, "usage window did not reopen within 1m")
    assert {s[1] for s in t.steps("m")[:-1]} <= {"paused"}


def test_a_wait_known_to_outlast_max_usage_wait_is_refused_at_once(
        loop_tree: LoopTree) -> None:
    """The stated reset lies past max_usage_wait: the run exits before waiting, saying
    when the window reopens and what to do (no minute spent waiting for a known end)."""
    t = loop_tree
    t.node("m", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "3")
    t.set_config("m", max_usage_wait="1m")  # the stub's window reopens in 120 s (+ 5 s)
    started = t.clock.time()
    t.run("m")
    status, code, reason = t.run_row("m")
    (credential,) = [c for (c,) in t.sql("SELECT credential FROM usage_windows")]
    assert (status, code) == ("exited", 1)
    assert re.fullmatch(r"usage window reopens at \S+Z, beyond max_usage_wait \(1m\): raise "
                        r"max_usage_wait and start the node again, or `fractal usage "
                        rf"reopen {credential}` if it reopened sooner", reason), reason
    assert t.steps("m") == [("A", "stopped", 0, reason)]
    assert t.clock.time() - started < 60  # it did not wait
    assert t.sql("SELECT COUNT(*) FROM events WHERE node = 'main.m' AND "
                 "event = 'usage_wait'") == [(0,)]


def test_a_stop_ends_the_usage_wait_and_closes_the_limited_step(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("q", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "3")
    t.clock.after(30, lambda: t.cli("node", "stop", "q"))
    t.run("q")
    assert t.run_row("q")[:2] == ("stopped", 0)
    assert t.steps("q") == [("A", "stopped", 0, "stopped waiting for the usage window")]
    assert len(t.launcher.work_calls()) == 1


def test_a_pause_parks_the_usage_wait(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("p", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.clock.after(30, lambda: t.cli("node", "pause", "p"))
    t.run("p")
    assert t.status("p") == "paused"
    t.run("p", resume=True)
    assert t.run_row("p") == ("completed", 0, "Reached max iterations (1)")


def test_a_resumed_run_no_longer_shows_the_parked_usage_wait(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("r", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.clock.after(30, lambda: t.cli("node", "pause", "r"))
    t.run("r")
    assert t.status("r") == "paused"
    t.sql_write("UPDATE usage_windows SET state = 'open', opened_at = ?, prober = NULL",
                t.clock.time())  # another node's probe reopened it meanwhile
    seen: list[str] = []
    t.launcher.on_spawn.append(lambda call: seen.append(
        t.cli("node", "status", "r").output.strip()))
    t.run("r", resume=True, parked_for=300)
    assert seen == ["active (run 1)"]
    assert t.run_row("r") == ("completed", 0, "Reached max iterations (1)")


def test_a_finish_ends_the_usage_wait_at_once(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("f", {"01-A.md": "[stub:limit-first=1]", "02-B.md": "b"}, "--no-sync",
           "--max-iters", "3")
    t.clock.after(30, lambda: t.cli("node", "finish", "f"))
    began = t.clock.monotonic()
    t.run("f")
    assert t.clock.monotonic() - began < 60  # not at the reset (120 s)
    assert t.run_row("f")[:2] == ("completed", 0)
    assert t.steps("f")[0] == ("A", "stopped", 0, "finish requested waiting for the usage window")
    assert len(t.launcher.work_calls()) == 1


def test_the_waited_time_is_credited_to_the_iteration_wall(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("i", {"01-A.md": "[stub:limit-first=1]", "02-B.md": "b"}, "--no-sync",
           "--max-iters", "1")
    t.set_config("i", iter_timeout="1m", interval="1m")
    t.run("i")  # a 120 s wait inside a 1 min iteration wall
    assert t.iterations("i") == [(1, "completed", 0, "")]
    assert [s[1] for s in t.steps("i")] == ["paused", "completed", "completed"]


def test_a_usage_wait_is_not_a_failed_iteration(loop_tree: LoopTree) -> None:
    t = loop_tree
    # the first two attempts meet the closed window, then every attempt fails
    t.node("c", {"01-A.md": "[stub:limit-first=2] [stub:fail=1]"}, "--no-sync",
           "--step-retries", "0")
    t.set_config("c", max_failed_iters=2)
    t.run("c")
    assert [i[1] for i in t.iterations("c")] == ["failed", "failed"]
    assert t.run_row("c")[2].startswith("2 consecutive iterations failed")
    assert [s[1] for s in t.steps("c")] == ["paused", "paused", "failed", "failed"]


def test_a_warning_above_usage_pause_at_waits_before_the_next_launch(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("w", {"01-A.md": "[stub:usage-warn=0.96]", "02-B.md": "b"}, "--no-sync",
           "--max-iters", "1")
    t.run("w")
    first, second = t.launcher.work_calls()
    assert second.started_at - first.started_at >= 120  # waited for the reset
    assert t.run_row("w") == ("completed", 0, "Reached max iterations (1)")
    assert t.sql("SELECT metadata FROM events WHERE event = 'usage_wait' ORDER BY event_id")[
        0][0].startswith("waiting for usage window until ")


def test_a_warning_below_usage_pause_at_does_not_wait(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("v", {"01-A.md": "[stub:usage-warn=0.5]", "02-B.md": "b"}, "--no-sync",
           "--max-iters", "1")
    t.run("v")
    first, second = t.launcher.work_calls()
    assert second.started_at - first.started_at < 60


# -- usage windows, tree-wide per credential ------------------------------------------------

def _window(t: LoopTree) -> tuple[Any, ...]:
    ((row),) = t.sql("SELECT credential, state, misses, closed_by FROM usage_windows")
    return tuple(row)


def _close_as_another_node(t: LoopTree, wake_in: float, *, state: str = "closed") -> None:
    """The credential's window, as if node main.other had just hit it (or probes it)."""
    now = t.clock.time()
    t.sql_write("UPDATE usage_windows SET state = ?, resets_at = ?, wake_at = ?, "
                "prober = ?, probe_started = ?, opened_at = NULL, misses = 0, "
                "closed_by = 'main.other'", state, now + wake_in, now + wake_in,
                "main.other" if state == "probing" else None,
                now if state == "probing" else None)


def test_the_node_that_hits_the_window_probes_and_reopens_it(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.run("a")
    _cred, state, misses, closed_by = _window(t)
    assert (state, misses, closed_by) == ("open", 0, "main.a")


def test_a_node_on_the_same_credential_waits_without_calling_the_api(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.run("a")  # leaves the credential's row (open)
    t.node("b", {"01-A.md": "[stub:write=b.txt:b]"}, "--no-sync", "--max-iters", "1")
    calls = len(t.launcher.calls)
    _close_as_another_node(t, 300)
    began = t.clock.monotonic()
    t.run("b")
    (probe,) = t.launcher.calls[calls:]  # one launch, and only once the window reset
    assert probe.started_at - began >= 300
    assert [s[:2] for s in t.steps("b")] == [("A", "completed")]  # no paused, no failed row
    assert t.iterations("b") == [(1, "completed", 0, "")]
    assert _window(t)[1:3] == ("open", 0)  # b was the one probe and reopened it


def test_a_probe_that_hits_the_wall_again_waits_for_the_new_reset(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.run("a")
    t.node("b", {"01-B.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    calls = len(t.launcher.calls)
    _close_as_another_node(t, 60)
    began = t.clock.monotonic()
    t.run("b")
    first, second = t.launcher.calls[calls:]
    assert first.started_at - began >= 60  # the probe, at the first reset
    assert second.started_at - first.started_at >= 120  # the wall again: the new reset
    assert [s[1] for s in t.steps("b")] == ["paused", "completed"]
    assert t.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]
    assert _window(t)[1:3] == ("open", 0)


def test_while_another_node_probes_the_others_wait_for_it(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.run("a")
    t.node("b", {"01-A.md": "b"}, "--no-sync", "--max-iters", "1")
    calls = len(t.launcher.calls)
    _close_as_another_node(t, 0, state="probing")
    began = t.clock.monotonic()
    t.clock.after(45, lambda: t.sql_write(
        "UPDATE usage_windows SET state = 'open', opened_at = ?, prober = NULL",
        t.clock.time()))  # the other node's probe got through
    t.run("b")
    (launch,) = t.launcher.calls[calls:]
    assert launch.started_at - began >= 45


def test_a_sync_that_hits_the_window_waits_too(loop_tree: LoopTree) -> None:
    t = loop_tree
    # NODE.md reaches the SYNC's prompt too: its first launch meets the closed window
    t.node("y", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1",
           node_md="# Task\n\n[stub:limit-first=1]\n")
    t.run("y")
    assert t.status("y") == "completed"
    rows = t.steps("y")
    assert rows[0][:2] == ("SYNC", "paused") and rows[0][3].startswith("usage limit")
    assert t.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]


def test_an_approval_wait_sync_waits_out_a_closed_window(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:limit-first=1]"}, "--no-sync", "--max-iters", "1")
    t.run("a")  # leaves the credential's row (open)
    t.node("g", {"01-GATE.md": "---\nrequires_approval: true\n---\ng"}, "--max-iters", "1",
           "--wait", "1m")
    calls = len(t.launcher.calls)
    began = t.clock.monotonic()
    t.clock.after(100, lambda: _close_as_another_node(t, 600))  # while the gate waits
    # a message for g arrives inside the closed window: its SYNC must wait for the reset
    # (a quiet wait launches no SYNC at all)
    t.clock.after(150, lambda: t.sql_write(
        "INSERT INTO messages (message_uuid, node, channel, sender, priority, subject, data, "
        "metadata, created_at) VALUES ('0badcafe', 'main.g', 'inbox', 'operator', 5, 'hi', "
        "'', '', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"))
    t.clock.after(1000, lambda: t.cli("node", "approve", "g"))
    t.run("g")
    assert t.run_row("g") == ("completed", 0, "Reached max iterations (1)")
    waits = [c.started_at - began for c in t.launcher.calls[calls:]
             if c.label.startswith("SYNC while")]
    assert waits and not [w for w in waits if 100 < w < 700]  # none into the closed window
    assert [w for w in waits if w >= 700]  # the first one after the reset was the probe
    assert _window(t)[1:3] == ("open", 0)
    assert t.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]
