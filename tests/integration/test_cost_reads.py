"""``fractal node cost`` and ``config get`` stay fast reads: no SQLAlchemy, alembic or
runtime imported (DESIGN: reads are plain queries), and their output shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_repo
from tests.stylecheck import modules_loaded, under
from tests.trees import run_cli

FORBIDDEN = ("sqlalchemy", "alembic", "watchdog", "libtmux", "fractal.runtime")


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = make_repo(tmp_path_factory.mktemp("costs") / "repo")
    for args in (["init"], ["node", "init", "n", "--max-cost", "2", "--max-iter-cost", "1"]):
        run_cli(args, repo)
    return repo


@pytest.mark.parametrize(("args", "out"), [
    (("node", "cost", "spent", "n"), "$0.0000"),
    (("node", "cost", "spent", "n", "--run", "--max-depth", "1"), "$0.0000"),
    (("node", "cost", "spent"), "$0.0000"),
    (("node", "cost", "remaining", "n"), "$2.0000"),
    (("node", "cost", "remaining", "n", "--iter"), "$1.0000"),
    (("node", "cost", "remaining", "n", "--step"), "$1.0000"),
    (("node", "cost", "breakdown", "--csv"), "node,max_cost,spent,unpriced\nmain.n,2,0,0"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_cost_reads_are_lazy(small_tree: Path, tmp_path: Path, args: tuple[str, ...],
                             out: str) -> None:
    proc, loaded = modules_loaded(args, cwd=small_tree, scratch=tmp_path / "modules.json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == out
    assert "fractal.store.spend" in loaded
    assert sorted(m for m in loaded if under(m, FORBIDDEN)) == []


def test_config_get_is_lazy(small_tree: Path, tmp_path: Path) -> None:
    proc, loaded = modules_loaded(("node", "config", "get", "reserve_budget"),
                                  cwd=small_tree / ".worktrees" / "main.n",
                                  scratch=tmp_path / "modules.json")
    assert (proc.returncode, proc.stdout.strip()) == (0, "0.2")
    assert sorted(m for m in loaded if under(m, FORBIDDEN)) == []


def test_a_root_has_no_run_to_read(small_tree: Path) -> None:
    proc = run_cli(["node", "cost", "spent", "--run"], small_tree, check=False)
    assert proc.returncode == 1 and "is the tree's root: it has no runs" in proc.stderr


@pytest.mark.parametrize("name", ["n", "main.n", "lead"])
def test_a_node_named_where_the_read_belongs_says_which_reads_take_it(
        small_tree: Path, name: str) -> None:
    proc = run_cli(["node", "cost", name], small_tree, check=False)
    assert proc.returncode == 2
    assert f"'{name}' is not a cost read (breakdown, remaining, spent)" in proc.stderr
    assert f"`fractal node cost spent {name}`" in proc.stderr
