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
