"""Attack: a node makes the files the loop reads huge (or endless) to exhaust the
supervisor's memory; an operator's ``--task-file`` names a device that never ends. Each
is refused past its cap (``domain.limits``), with the cap and what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.domain.limits import NODE_FILE_CAP, TASK_FILE_CAP
from fractal.runtime.iteration import RunAbort, load_plans
from tests.helpers import copy_of_tree, make_repo
from tests.loopfakes import LoopTree, loop_tree
from tests.trees import run_cli_as

__all__ = ["loop_tree"]


def _sparse(path: Path, size: int) -> None:
    """``path`` as a file of ``size`` bytes that takes no disk (a hole)."""
    with open(path, "wb") as fh:
        fh.truncate(size)


def test_an_oversized_node_md_ends_the_run_with_the_cap(loop_tree: LoopTree) -> None:
    t = loop_tree
    ndir = t.node("big", {"01-A.md": "[stub:write=a.txt:a]"}, "--no-sync", "--max-iters", "1")
    _sparse(ndir / "NODE.md", 6 << 30)  # 6 GiB: read whole, it would exhaust the memory
    t.run("big")
    status, _code, reason = t.run_row("big")
    assert status != "completed"
    assert "NODE.md is over the 1024 KiB cap" in str(reason), reason
    assert t.steps("big") == []  # no agent was given a prompt


def test_an_oversized_step_file_is_refused(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "01-A.md").write_text("a\n")
    _sparse(steps / "02-HUGE.md", NODE_FILE_CAP + 1)
    with pytest.raises(RunAbort, match=r"step file 02-HUGE\.md is over the 1024 KiB cap"):
        load_plans(steps)


def test_a_step_file_at_the_cap_is_read(tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "01-A.md").write_text("a" * NODE_FILE_CAP)
    assert [p.file.name for p in load_plans(steps)] == ["A"]


def _tree(repo: Path) -> None:
    make_repo(repo)
    assert run_cli_as(repo, "init").returncode == 0


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return copy_of_tree(tmp_path / "repo", "security-bounded", _tree)


def test_task_file_dev_zero_is_refused(repo: Path) -> None:
    out = run_cli_as(repo, "node", "init", "a", "--task-file", "/dev/zero")
    assert out.returncode != 0
    assert "not a regular file" in out.stderr
    assert not (repo / ".worktrees" / "main.a").exists()


def test_task_file_over_the_cap_is_refused(repo: Path, tmp_path: Path) -> None:
    big = tmp_path / "task.md"
    _sparse(big, TASK_FILE_CAP + 1)
    out = run_cli_as(repo, "node", "init", "a", "--task-file", str(big))
    assert out.returncode != 0
    assert "over the 1024 KiB cap" in out.stderr


def test_an_oversized_config_json_is_refused_by_name(repo: Path) -> None:
    assert run_cli_as(repo, "node", "init", "a").returncode == 0
    config = repo / ".worktrees" / "main.a" / ".fractal" / "main.a" / "config.json"
    with open(config, "ab") as fh:
        fh.truncate(NODE_FILE_CAP + 10)
    out = run_cli_as(repo, "node", "config", "get", "max_iters", "--path",
                     str(repo / ".worktrees" / "main.a"))
    assert out.returncode != 0
    assert "over the 1024 KiB cap" in out.stderr
    assert os.path.getsize(config) == NODE_FILE_CAP + 10


def test_pool_items_from_dev_zero_are_refused(repo: Path, tmp_path: Path) -> None:
    brief = tmp_path / "brief.md"
    brief.write_text("do the item\n")
    out = run_cli_as(repo, "node", "pool", "p", "--items", "/dev/zero", "--brief", str(brief))
    assert out.returncode != 0
    assert "--items" in out.stderr and "not a regular file" in out.stderr
