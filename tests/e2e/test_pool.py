"""The worker pool through the real CLI on a private tmux server: nine items, three workers
at a time, real commits merged into the pool's branch, one item that fails twice, one
the review rejects and a second attempt passes, and the dispatcher (the pool node's
supervisor) SIGKILLed mid-pool and resumed."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

AGENT = Path(__file__).resolve().parent.parent / "stubs" / "pool_agent.py"


def _items(tree: Tree) -> dict[str, dict[str, object]]:
    out = tree.cli("pool", "status", "pool", "--json").stdout
    return {str(i["id"]): i for i in json.loads(out)["items"]}


def _no_dispatch_round(proc: psutil.Process) -> bool:
    """True when the supervisor runs no `fractal pool dispatch` round right now."""
    try:
        return not any("dispatch" in " ".join(c.cmdline()) for c in proc.children(True))
    except psutil.Error:
        return False


@pytest.mark.timeout(600)
def test_a_pool_of_nine_survives_a_killed_dispatcher(tree: Tree, tmp_path: Path) -> None:
    story = tmp_path / "story"
    story.mkdir()
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"i{n}", "input": f"write item {n}"}) + "\n"
                             for n in range(1, 10)))
    brief = tmp_path / "brief.md"
    brief.write_text("Write items/<id>.txt for your item.\n")
    env = {**os.environ, "STORY_DIR": str(story), "POOL_FAIL": "i9", "POOL_REJECT": "i2",
           "POOL_HOLD": "i3,i4,i5"}
    tree.cli("node", "pool", "pool", "--items", str(items), "--brief", str(brief),
             "--max-workers", "3", "--agent", f"{sys.executable} {AGENT}",
             "--step-retries", "0", "--max-cost", "5")
    steps = sorted(p.name for p in (tree.node_dir("pool") / "steps").iterdir())
    assert steps == ["00-DISPATCH.md", "01-REVIEW.md"]
    tree.cli("node", "start", "pool", env=env)

    # Mid-pool: i1 and i2 done, i3-i5 held by live workers (every slot busy, so no round
    # can start), and the dispatcher between rounds. Then SIGKILL it.
    def mid_pool() -> bool:
        now = _items(tree)
        return (all(now[i]["status"] == "done" for i in ("i1", "i2"))
                and all(now[i]["status"] == "claimed" for i in ("i3", "i4", "i5"))
                and all(tree.status(f"pool.{i}") == "active" for i in ("i3", "i4", "i5")))

    wait_until(mid_pool, timeout=120, message="i1, i2 done and i3-i5 held")
    supervisor = tree.supervisor("pool")
    wait_until(lambda: _no_dispatch_round(supervisor), timeout=30, message="between rounds")
    os.kill(supervisor.pid, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(supervisor.pid) or
               supervisor.status() == psutil.STATUS_ZOMBIE, timeout=10)
    (story / "release").write_text("")  # the held workers finish while nobody dispatches
    for name in ("i3", "i4", "i5"):
        assert tree.wait_settled(f"pool.{name}", timeout=60) == "completed"
    tree.cli("node", "status", "pool")  # a read heals the dead supervisor: parked
    assert tree.wait_status("pool", {"paused"}, timeout=30) == "paused"
    tree.cli("node", "resume", "pool", env=env)

    assert tree.wait_settled("pool", timeout=180) == "completed", \
        (tree.node_dir("pool") / "pane.log").read_text(errors="replace")[-4000:]
    (reason,), = tree.sql("SELECT metadata FROM runs WHERE node = 'main.pool'")
    assert reason == "pool: 8 done, 1 failed"

    final = _items(tree)
    assert {i: (v["status"], v["attempts"]) for i, v in final.items()} == {
        **{f"i{n}": ("done", 1) for n in (1, 3, 4, 5, 6, 7, 8)},
        "i2": ("done", 2), "i9": ("failed", 2)}
    assert final["i2"]["result"] == "wrote i2 (attempt 2)"
    assert str(final["i9"]["result"]).startswith("exited: ")

    # Attempts exact and never two at once: one worker run per attempt, none overlapping.
    launched = (story / "attempts.txt").read_text().split()
    assert sorted(launched) == sorted([f"i{n}" for n in range(1, 10)] + ["i2", "i9"])
    for name, item in final.items():
        runs = tree.sql("SELECT started_at, ended_at FROM runs WHERE node = ? "
                        "ORDER BY run_id", f"main.pool.{name}")
        assert len(runs) == item["attempts"], (name, runs)
        for before, after in itertools.pairwise(runs):
            assert str(before[1]) <= str(after[0]), (name, runs)

    # Nothing lost: every done item's file is on the pool's branch, i2 from its 2nd try.
    listed = git(tree.repo, "ls-tree", "-r", "--name-only", "main.pool").split()
    assert {f"items/i{n}.txt" for n in (1, 2, 3, 4, 5, 6, 7, 8)} <= set(listed)
    assert "items/i9.txt" not in listed
    assert git(tree.repo, "show", "main.pool:items/i2.txt").strip() == "i2 attempt 2"

    # One review, with every result in its prompt; the rejection reached the worker.
    review = (story / "review-prompt.txt").read_text()
    assert "| i9 | failed | 2 |" in review and "wrote i1 (attempt 1)" in review
    assert "fractal pool reject" in review
    node_md = (tree.node_dir("pool.i2") / "NODE.md").read_text()
    assert "rejected: too short" in node_md
    reviews = tree.sql("SELECT COUNT(*) FROM steps WHERE node = 'main.pool' AND "
                       "step_name = 'REVIEW' AND status = 'completed'")
    assert reviews == [(1,)]
    notices = [str(s) for (s,) in tree.sql("SELECT subject FROM messages WHERE node = "
                                           "'main.pool' AND channel = 'outbox'")]
    assert any("pool: 8 done, 1 failed" in s for s in notices), notices
