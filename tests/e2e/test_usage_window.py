"""The `command` backend's usage-limit line through the real CLI: the node waits in its
supervisor until the stated reset, shows it in `node status`, then re-enters the step
and completes; the limited attempt is `paused`, never `failed`."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from tests.e2e.conftest import Tree
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e

AGENT = """#!/bin/sh
cat > /dev/null
if [ ! -e "$0.limited" ]; then
  touch "$0.limited"
  echo '{"type": "cost", "usd": 0.05}'
  echo "{\\"type\\": \\"usage_limit\\", \\"resets_at\\": $(( $(date +%s) + 3 )), \\"window\\": \\"five_hour\\"}"
  exit 1
fi
echo done > done.txt
echo '{"type": "cost", "usd": 0.01}'
"""


SHORT_JITTER = {"FRACTAL_RESUME_JITTER_S": "0.5"}
"""The probe launches 0.5 s past the stated reset instead of 5 s."""


def test_a_usage_limit_line_waits_for_the_reset_and_reenters_the_step(tree: Tree) -> None:
    agent = tree.repo.parent / "limited-agent"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    tree.node("w", {"01-A.md": "work"}, "--no-sync", "--max-iters", "1", "--agent", str(agent))
    began = time.time()
    tree.cli("node", "start", "w", env={**(tree.env or os.environ), **SHORT_JITTER})
    line = wait_until(lambda: (out := tree.cli("node", "status", "w").stdout.strip())
                      .startswith("active (waiting for usage window until") and out,
                      timeout=30, message="waiting for the window")
    assert line.endswith("Z)")
    assert tree.wait_settled("w", timeout=60) == "completed"
    # not before the reset: the agent states it in whole seconds (`date +%s` + 3, at
    # least began + 2) and the probe waits 0.5 s past it
    assert time.time() - began >= 2.5
    rows = tree.sql("SELECT status, cost, metadata FROM steps ORDER BY step_id")
    assert [r[0] for r in rows] == ["paused", "completed"]
    assert str(rows[0][2]).startswith("usage limit (five_hour) until ")
    assert rows[0][1] == 0.05  # the limited attempt's spend is kept
    assert tree.sql("SELECT status, metadata FROM runs") == [
        ("completed", "Reached max iterations (1)")]
    subjects = [str(s) for (s,) in tree.sql("SELECT subject FROM messages ORDER BY rowid")]
    assert any(s.startswith("waiting for usage window until") for s in subjects)
    assert "usage window reopened (five_hour)" in subjects
    assert tree.cli("node", "cost", "spent", "w").stdout.strip() == "$0.0600"


FAR_AGENT = """#!/bin/sh
cat > /dev/null
echo '{"type": "cost", "usd": 0.05}'
echo "{\\"type\\": \\"usage_limit\\", \\"resets_at\\": $(( $(date +%s) + 3600 )), \\"window\\": \\"five_hour\\"}"
exit 1
"""


def test_kill_ends_a_usage_window_wait_at_once(tree: Tree) -> None:
    agent = tree.repo.parent / "far-agent"
    agent.write_text(FAR_AGENT)
    agent.chmod(0o755)
    tree.node("k", {"01-A.md": "work"}, "--no-sync", "--max-iters", "1", "--agent", str(agent))
    tree.cli("node", "start", "k")
    wait_until(lambda: tree.cli("node", "status", "k").stdout.startswith(
        "active (waiting for usage window until"), timeout=30, message="waiting for the window")
    assert "main.k,active,waiting for usage window until " in tree.cli(
        "node", "list", "--csv").stdout  # `node list` shows the wait too
    ((pid,),) = tree.sql("SELECT supervisor_pid FROM nodes WHERE node = 'main.k'")
    began = time.monotonic()
    tree.cli("node", "kill", "k")
    assert tree.wait_settled("k", timeout=30) == "killed"
    assert time.monotonic() - began < 15  # not at the reset an hour away
    assert not psutil.pid_exists(int(str(pid))) or \
        psutil.Process(int(str(pid))).status() == psutil.STATUS_ZOMBIE
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert [s for (s,) in tree.sql("SELECT status FROM runs")] == ["killed"]
    assert tree.sql("SELECT cost FROM steps") == [(0.05,)]  # the limited attempt's spend kept


ONCE_FAR_AGENT = """#!/bin/sh
cat > /dev/null
if [ ! -e "$0.limited" ]; then
  touch "$0.limited"
  echo "{\\"type\\": \\"usage_limit\\", \\"resets_at\\": $(( $(date +%s) + 3600 )), \\"window\\": \\"five_hour\\"}"
  exit 1
fi
echo done > done.txt
"""


def test_the_operator_reopens_a_window_and_the_waiting_node_probes_now(tree: Tree) -> None:
    """A window recorded closed for an hour that has in fact reopened: `fractal usage
    reopen` (the operator's; a node's shell is refused) makes the waiting node probe at
    once, and its launch gets through."""
    agent = tree.repo.parent / "once-far-agent"
    agent.write_text(ONCE_FAR_AGENT)
    agent.chmod(0o755)
    tree.node("r", {"01-A.md": "work"}, "--no-sync", "--max-iters", "1", "--agent", str(agent))
    tree.cli("node", "start", "r")
    wait_until(lambda: tree.cli("node", "status", "r").stdout.startswith(
        "active (waiting for usage window until"), timeout=30, message="waiting for the window")
    ((credential,),) = tree.sql("SELECT credential FROM usage_windows")
    listed = tree.cli("usage", "list").stdout
    assert listed.startswith(f"{credential}  five_hour  closed until ")

    refused = tree.cli("usage", "reopen", str(credential), check=False, cwd=tree.worktree("r"))
    assert refused.returncode != 0
    assert "only the operator at the root may usage reopen" in refused.stderr
    assert tree.cli("node", "status", "r").stdout.startswith("active (waiting for usage")

    began = time.monotonic()
    done = tree.cli("usage", "reopen", str(credential)[:6])
    assert f"usage window {credential} (five_hour) reopened for a probe" in done.stderr
    assert tree.wait_settled("r", timeout=30) == "completed"
    assert time.monotonic() - began < 20  # not at the recorded reset an hour away
    assert [s for (s,) in tree.sql("SELECT status FROM steps ORDER BY step_id")] == [
        "paused", "completed"]
    assert tree.sql("SELECT state FROM usage_windows") == [("open",)]
    assert [(a, s) for (a, s) in tree.sql("SELECT actor, status FROM events WHERE "
                                          "event = 'usage_reopen'")] == [("operator",
                                                                          "completed")]
    again = tree.cli("usage", "reopen", str(credential))
    assert "is open: nothing to reopen" in again.stderr
