"""The `command` backend's usage-limit line through the real CLI: the node waits in its
supervisor until the stated reset, shows it in `node status`, then re-enters the step
and completes; the limited attempt is `paused`, never `failed`."""

from __future__ import annotations

import time

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


def test_a_usage_limit_line_waits_for_the_reset_and_reenters_the_step(tree: Tree) -> None:
    agent = tree.repo.parent / "limited-agent"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    tree.node("w", {"01-A.md": "work"}, "--no-sync", "--max-iters", "1", "--agent", str(agent))
    began = time.time()
    tree.cli("node", "start", "w")
    line = wait_until(lambda: (out := tree.cli("node", "status", "w").stdout.strip())
                      .startswith("active (waiting for usage window until") and out,
                      timeout=30, message="waiting for the window")
    assert line.endswith("Z)")
    assert tree.wait_settled("w", timeout=60) == "completed"
    assert time.time() - began >= 3  # not before the reset
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
