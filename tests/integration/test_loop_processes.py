"""The loop in-process with real agent processes (the stub agent) and the system clock:
what only a real process shows, without a tmux pane. Moved down from
tests/e2e/test_bad_input.py, same assertions."""

from __future__ import annotations

import psutil

from tests.loopfakes import LoopTree, real_loop_tree

__all__ = ["real_loop_tree"]


def _stub_processes(t: LoopTree) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        try:
            values = " ".join(proc.environ().values())
        except psutil.Error:
            continue
        if "agent_stub.py" in cmd and str(t.repo) in values:
            found.append(proc.pid)
    return found


def test_flood_and_invalid_utf8_do_not_break_the_loop(real_loop_tree: LoopTree) -> None:
    t = real_loop_tree
    steps = {"01-FLOOD.md": "[stub:flood=50] [stub:badutf8] [stub:longline=12] [stub:cost=0.5]"}
    t.node("flood", steps, "--no-sync", "--max-iters", "1")
    t.run("flood")
    assert t.status("flood") == "completed"
    assert t.sql("SELECT status, cost FROM steps") == [("completed", 0.5)]


def test_agent_ignoring_sigterm_is_killed_at_the_limit(real_loop_tree: LoopTree) -> None:
    t = real_loop_tree
    steps = {"01-STUBBORN.md": "[stub:ignore-term] [stub:hang]"}
    t.node("stubborn", steps, "--no-sync", "--max-iters", "1", "--step-timeout", "1s")
    t.run("stubborn")
    assert t.status("stubborn") == "exited"
    assert t.steps("stubborn") == [("STUBBORN", "exited", 124, "timed out; unpriced")]
    assert not _stub_processes(t)
