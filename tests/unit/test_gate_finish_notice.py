"""A gate that a finish (or stop) already pending closes at once posts no "awaits
approval" notice: its approve command would name a step that is gone a moment later.
In-process loop on the fake clock, the real verbs."""

from __future__ import annotations

import pytest

from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def _subjects(t: LoopTree) -> list[str]:
    return [str(s) for (s,) in t.sql("SELECT subject FROM messages ORDER BY message_id")]


@pytest.mark.parametrize("verb", ["finish", "stop"])
def test_a_gate_closed_at_once_by_a_pending_verb_is_not_announced(
        loop_tree: LoopTree, verb: str) -> None:
    t = loop_tree
    steps = {"01-A.md": "---\nrequires_approval: true\n---\nwork",
             "02-B.md": "[stub:write=b.txt:b]"}
    t.node("quick", steps, "--no-sync", "--max-iters", "3")
    t.during("(A)", lambda: t.cli("node", verb, "quick"))  # pending before the gate
    t.run("quick")
    assert not [s for s in _subjects(t) if "awaits approval" in s]
    assert t.sql("SELECT step_name, status FROM steps") == [("A", "stopped")]


def test_a_gate_without_a_pending_verb_is_still_announced(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "---\nrequires_approval: true\n---\nwork"}
    t.node("held", steps, "--no-sync", "--max-iters", "1")
    t.during("(A)", lambda: t.clock.after(5, lambda: t.cli("node", "finish", "held")))
    t.run("held")
    assert [s for s in _subjects(t) if "awaits approval" in s] == [
        "A awaits approval: fractal node approve main.held 1"]
