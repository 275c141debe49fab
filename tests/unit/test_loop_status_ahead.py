"""The backstop's status started at the iteration's last agent end (runtime/statusahead.py):
when it is used, when it is voided, and that no change the backstop should commit is
missed because of it."""

from __future__ import annotations

from pathlib import Path

from fractal.runtime.statusahead import FRESH_SECONDS, StatusAhead
from tests.helpers import git
from tests.loopfakes import FakeClock, LoopTree, loop_tree

__all__ = ["loop_tree"]


def _answer(ahead: StatusAhead) -> list[str] | None:
    pending = ahead.take()
    if pending is None:
        return None
    result = pending.result()
    assert result is not None
    return result[0]


def test_an_armed_end_starts_the_status_and_the_backstop_may_take_it(repo: Path) -> None:
    ahead = StatusAhead(repo, FakeClock())
    (repo / "before.txt").write_text("x\n")
    ahead.agent_gone()  # not armed: nothing starts
    assert ahead.take() is None
    ahead.arm()
    ahead.agent_gone()
    assert _answer(ahead) == ["before.txt"]
    assert ahead.take() is None  # taken once


def test_the_status_is_started_ahead_only_while_the_last_backstop_found_changes(
        repo: Path) -> None:
    ahead = StatusAhead(repo, FakeClock())
    ahead.arm()
    ahead.backstop_found(False)  # an iteration that ended clean: no guess next time
    ahead.agent_gone()
    assert ahead.take() is None
    ahead.backstop_found(True)
    (repo / "left.txt").write_text("x\n")
    ahead.agent_gone()
    assert _answer(ahead) == ["left.txt"]


def test_a_spawn_or_a_wait_voids_the_status_started_ahead(repo: Path) -> None:
    clock = FakeClock()
    ahead = StatusAhead(repo, clock)
    ahead.arm()
    ahead.agent_gone()
    ahead.agent_starting()  # another agent: the answer may be stale
    assert ahead.take() is None
    ahead.agent_gone()
    clock.now += FRESH_SECONDS + 0.1  # a wait came between (a gate, a usage window)
    assert ahead.take() is None
    ahead.agent_gone()
    ahead.discard()
    assert ahead.take() is None


def test_a_commit_after_the_status_started_makes_the_backstop_ask_again(repo: Path) -> None:
    ahead = StatusAhead(repo, FakeClock())
    ahead.arm()
    (repo / "a.txt").write_text("a\n")
    ahead.agent_gone()
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "a")
    pending = ahead.take()
    assert pending is not None and pending.result() is None  # the index and HEAD moved


def _commits(t: LoopTree, name: str) -> list[tuple[str, list[str]]]:
    """(subject, files) of each commit on the node's branch past main, oldest first."""
    out = git(t.worktree(name), "log", "--reverse", "--format=%x00%s", "--name-only",
              "main..HEAD")
    commits = []
    for chunk in out.split("\0")[1:]:
        subject, *files = chunk.split("\n")
        commits.append((subject, sorted(f for f in files if f.strip())))
    return commits


def test_an_edit_during_the_last_steps_approval_wait_is_in_the_backstop(
        loop_tree: LoopTree) -> None:
    """The last step is gated: its agent ends long before the backstop, so a status taken
    at its end (a clean worktree: the agents wrote nothing) would miss what changed during
    the wait."""
    t = loop_tree
    steps = {"01-A.md": "work", "02-B.md": "---\nrequires_approval: true\n---\nwork"}
    t.node("gate", steps, "--no-sync", "--max-iters", "1")

    def during_the_wait() -> None:
        (t.worktree("gate") / "late.txt").write_text("written at the gate\n")
        t.cli("node", "approve", "gate")
    t.during("(B)", lambda: t.clock.after(30, during_the_wait))
    t.run("gate")
    assert t.status("gate") == "completed"
    # the iteration's own backstop commits it (not only the run's final one)
    assert ("main.gate: iteration 1.1 (auto)", ["late.txt"]) in _commits(t, "gate")


def test_the_last_steps_files_are_in_the_backstop_every_iteration(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "[stub:append=a.txt:a]", "02-B.md": "[stub:append=b.txt:b]"}
    t.node("every", steps, "--no-sync", "--max-iters", "3")
    t.run("every")
    assert t.status("every") == "completed"
    assert [c for c in _commits(t, "every") if "b.txt" in c[1]] == [
        (f"main.every: iteration 1.{n} (auto)", ["a.txt", "b.txt"]) for n in (1, 2, 3)]


def test_a_change_after_clean_iterations_is_in_its_own_iterations_backstop(
        loop_tree: LoopTree) -> None:
    """Clean iterations stop the guess; the backstop's own status still sees the change
    the third iteration's agent leaves."""
    t = loop_tree
    t.node("clean", {"01-A.md": "work"}, "--no-sync", "--max-iters", "3")
    spawns: list[int] = []

    def third_leaves_a_file(_call: object) -> None:
        spawns.append(1)
        if len(spawns) == 3:
            (t.worktree("clean") / "left.txt").write_text("left by the third\n")
    t.launcher.on_spawn.append(third_leaves_a_file)
    t.run("clean")
    assert t.status("clean") == "completed"
    assert [c for c in _commits(t, "clean") if "iteration" in c[0]] == [
        ("main.clean: iteration 1.3 (auto)", ["left.txt"])]
