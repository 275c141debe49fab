"""A node's worktree or branch removed behind the loop's back while it runs: the next
launch is not made (an agent started in a recreated plain directory would run git on the
enclosing repository), the iteration fails and the run ends ``exited`` naming what went."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]


@pytest.mark.parametrize("gone", ["worktree", "recreated", "branch"])
def test_the_loop_stops_once_its_checkout_is_gone(loop_tree: LoopTree, gone: str) -> None:
    t = loop_tree
    t.node("v", {"01-A.md": "first", "02-B.md": "second"}, "--no-sync", "--max-iters", "3",
           "--step-retries", "2", "--step-retry-backoff", "1s")
    worktree = t.worktree("v")

    def vanish(call: FakeCall) -> None:
        if len(t.launcher.calls) != 1:
            return
        if gone == "branch":
            subprocess.run(["git", "update-ref", "-d", "refs/heads/main.v"], cwd=t.repo,
                           check=True, capture_output=True)
            return
        shutil.rmtree(worktree)
        if gone == "recreated":  # something wrote into the node dir again
            (worktree / ".fractal" / "main.v" / "tmp").mkdir(parents=True)

    t.launcher.on_spawn.append(vanish)
    t.run("v")
    assert len(t.launcher.calls) == 1  # nothing launched after the checkout went
    status, code, reason = t.run_row("v")
    what = "branch" if gone == "branch" else "worktree"
    assert (status, code) == ("exited", 1)
    assert reason.startswith(f"the node's {what} is gone: ")
    assert [r[1] for r in t.iterations("v")] == ["failed"]
