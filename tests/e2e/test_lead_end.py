"""How a lead's run ends, through the real CLI and tmux: the node's own agent ends it with
``fractal node done``; a kill at a waiting approval gate leaves a gate never approved,
which ``node merge`` refuses without ``--force`` as it does after a finish."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e


def test_the_agent_ends_its_own_run_with_node_done(tree: Tree) -> None:
    steps = {"01-A.md": "[stub:write=a.txt:a] [stub:done=tests pass]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("lead", steps, "--no-sync", "--max-iters", "5")
    tree.cli("node", "start", "lead")
    assert tree.wait_settled("lead") == "completed"
    assert tree.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("completed", 0, "Done: tests pass")]
    assert tree.sql("SELECT step_name, status FROM steps") == [("A", "completed")]
    assert tree.sql("SELECT COUNT(*) FROM iterations") == [(1,)]
    assert git(tree.repo, "show", "main.lead:a.txt") == "a"
    assert tree.sql("SELECT actor, status, metadata FROM events WHERE event = 'done'") == [
        ("main.lead", "completed", "tests pass")]


def test_done_from_outside_the_node_is_refused(tree: Tree) -> None:
    out = tree.cli("node", "done", "--reason", "x", check=False)
    assert out.returncode == 1
    assert "outside any node" in out.stderr and "fractal node finish NODE" in out.stderr


def test_a_kill_at_a_waiting_gate_needs_force_to_merge(tree: Tree) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a] "
                        "[stub:commit=add a]",
             "02-B.md": "b"}
    tree.node("gated", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "gated")
    wait_until(lambda: tree.sql("SELECT COUNT(*) FROM steps WHERE metadata = "
                                "'awaiting approval'") == [(1,)], timeout=30,
               message="A waits for approval")
    tree.cli("node", "kill", "gated")
    assert tree.status("gated") == "killed"
    (meta,), = tree.sql("SELECT metadata FROM steps WHERE step_name = 'A'")
    assert str(meta).startswith("awaiting approval; killed by operator"), meta
    ended = [str(s) for (s,) in tree.sql("SELECT subject FROM messages WHERE node = "
                                         "'main.gated' AND channel = 'outbox'")]
    assert "run killed: killed by operator; A never approved" in ended, ended  # the feed's
    refused = tree.cli("node", "merge", "gated", check=False)
    assert refused.returncode == 1 and "A never approved" in refused.stderr, refused.stderr
    assert "--force" in refused.stderr
    assert tree.cli("node", "merge", "gated", "--force").returncode == 0
    assert git(tree.repo, "show", "main:a.txt") == "a"


def test_node_done_during_a_children_wait_ends_the_run_without_the_child(tree: Tree) -> None:
    """The lead waits for its child, held at its gate; the lead's ``node done`` ends the
    wait at once (not at the 10m window, nor the child's end): the run ends completed with
    the done's reason, and the child is left at its gate for the operator."""
    tree.node("lead", {"01-A.md": "[stub:write=a.txt:a]",
                       "02-MERGE.md": "---\nwait: children\n---\nm"},
              "--no-sync", "--max-iters", "1", "--wait", "10m")
    tree.cli("node", "init", "c", "--parent", "lead", "--no-sync", "--max-iters", "1",
             "--gate", "PLAN")
    tree.cli("node", "start", "lead.c")
    tree.cli("node", "start", "lead")
    wait_until(lambda: "waiting for 1 child: c awaiting approval" in
               tree.cli("node", "status", "lead").stdout, timeout=60,
               message="the lead waits for c at its gate")
    said = tree.cli("node", "done", "--reason", "c is the operator's", cwd=tree.worktree("lead"))
    assert "main.lead is done" in said.stderr
    assert tree.wait_settled("lead", timeout=30) == "completed"
    assert tree.sql("SELECT status, exit_code, metadata FROM runs WHERE node = 'main.lead'") \
        == [("completed", 0, "Done: c is the operator's")]
    assert tree.sql("SELECT status, metadata FROM steps WHERE node = 'main.lead' AND "
                    "step_name = 'WAIT'") == [("stopped", "done while waiting for children")]
    assert tree.status("lead.c") == "active"  # still at its gate, the operator's to approve
    tree.cli("node", "stop", "lead.c")
