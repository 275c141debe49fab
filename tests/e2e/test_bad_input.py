"""Bad input ends in a clear error or a recorded, explained state."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, pid_alive, wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("files", "reason"), [
    ({}, "no step files"),
    ({"1-A.md": "a", "02-B.md": "b"}, "invalid step files"),
    ({"A.md": "a"}, "invalid step files"),
])
def test_broken_steps_dir_fails_iterations_loudly(tree: Tree, files: dict[str, str],
                                                  reason: str) -> None:
    tree.node("broken", files, "--no-sync")
    started = tree.cli("node", "start", "broken")
    assert f"warning: steps/ is not valid now: {reason}" in started.stderr  # said up front
    assert tree.wait_settled("broken") == "exited"
    iters = tree.sql("SELECT status, metadata FROM iterations ORDER BY iter")
    assert len(iters) == 3  # three in a row end the run instead of spinning forever
    assert all(status == "failed" and meta.startswith(reason) for status, meta in iters)
    assert tree.sql("SELECT status, exit_code FROM runs") == [("exited", 1)]


def test_start_points_out_an_unwritten_task_and_frontmatter_mistakes(tree: Tree) -> None:
    tree.cli("node", "init", "raw", "--no-sync", "--max-iters", "1")
    steps = tree.node_dir("raw") / "steps"
    first = sorted(steps.iterdir())[0]
    first.write_text("---\nTimeout: 1s\n---\n" + first.read_text())
    started = tree.cli("node", "start", "raw")
    assert f"warning: steps/{first.name}: 'Timeout: 1s' is ignored" in started.stderr
    assert "NODE.md still holds the template's placeholder for the task" in started.stderr
    assert tree.wait_settled("raw") == "completed"  # warnings only: the run goes on


def test_start_checks_never_block_on_odd_files(tree: Tree) -> None:
    """A NODE.md that is a FIFO (reading it would block forever) and a step file with
    thousands of mistakes: start returns at once, with a bounded list of warnings."""
    tree.cli("node", "init", "odd", "--no-sync", "--max-iters", "1")
    ndir = tree.node_dir("odd")
    (ndir / "NODE.md").unlink()
    os.mkfifo(ndir / "NODE.md")
    first = sorted((ndir / "steps").iterdir())[0]
    first.write_text("---\n" + "".join(f"Model{n}x: y\nunknown{n}: z\n" for n in range(3000))
                     + "---\nwork\n")
    started = tree.cli("node", "start", "odd")
    warnings = [ln for ln in started.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) <= 6 and warnings[-1].endswith("... and 2995 more")
    tree.wait_settled("odd")


def test_frontmatter_mistakes_are_warned_and_the_warning_is_kept(tree: Tree) -> None:
    """What the grammar silently ignores is named in the pane, pane.log and
    supervisor.log; the step still runs as the grammar says (an unclosed block is prompt)."""
    steps = {"01-A.md": "---\nTimeout: 1s\nrequires_approval: yes\n---\nwork",
             "02-B.md": "---\ncheck: exit 3\nwork"}
    ndir = tree.node("typo", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "typo")
    assert tree.wait_settled("typo") == "completed"
    expected = ["steps/01-A.md: 'Timeout: 1s' is ignored: write it as 'timeout: value'",
                "steps/01-A.md: requires_approval: 'yes' means false: only 'true' turns it on",
                "steps/02-B.md: the first line opens a --- block that never closes"]
    for log in ("pane.log", "supervisor.log"):
        text = (ndir / log).read_text()
        assert all(line in text for line in expected), (log, text)
    assert tree.sql("SELECT step_name, status FROM steps ORDER BY step_id") == [
        ("A", "completed"), ("B", "completed")]


def test_start_refuses_a_missing_agent_binary(tree: Tree) -> None:
    tree.node("nobin", {"01-A.md": "x"}, "--agent", "definitely-not-installed-agent")
    out = tree.cli("node", "start", "nobin", check=False)
    assert out.returncode == 1
    assert "agent binary not found: definitely-not-installed-agent" in out.stderr
    assert "Traceback" not in out.stderr
    assert tree.status("nobin") == "idle"


def test_setsid_grandchild_is_reaped(tree: Tree) -> None:
    pid_file = tree.repo.parent / "grandchild.pid"
    steps = {"01-FORK.md": f"[stub:setsid-child={pid_file}]"}
    tree.node("forker", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "forker")
    assert tree.wait_settled("forker") == "completed"
    pid = int(pid_file.read_text())
    wait_until(lambda: not pid_alive(pid), timeout=10, message="setsid grandchild reaped")


def test_two_racing_starts_one_refuses(tree: Tree) -> None:
    tree.node("racer", {"01-A.md": "[stub:sleep=3]"}, "--no-sync", "--max-iters", "1")
    results: list[int] = []

    def start() -> None:
        results.append(tree.cli("node", "start", "racer", check=False).returncode)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1]
    assert tree.wait_settled("racer") == "completed"
    assert len(tree.sql("SELECT run_id FROM runs")) == 1


def test_dotted_root_branch_gets_a_tmux_safe_session(tmp_path: Path) -> None:
    import sys

    from tests.e2e.conftest import STUB, run_cli
    from tests.helpers import make_repo

    repo = make_repo(tmp_path / "dots", branch="rel.v1")
    agent = tmp_path / "agent"
    agent.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{STUB}' \"$@\"\n")
    agent.chmod(0o755)
    run_cli(["init", "--agent", str(agent)], repo)
    run_cli(["node", "init", "n", "--max-iters", "1", "--no-sync"], repo)
    run_cli(["node", "start", "n"], repo)
    db = repo / ".fractal" / "rel.v1" / "fractal.db"
    import sqlite3

    def status() -> str:
        con = sqlite3.connect(db)
        try:
            return str(con.execute("SELECT status, tmux_session FROM nodes").fetchone())
        finally:
            con.close()

    wait_until(lambda: "completed" in status(), timeout=30)
    assert "." not in status().split(",")[1]
    assert git(repo, "log", "-1", "--format=%s", "rel.v1.n").startswith("rel.v1.n:")
