"""The limits a spawned node inherits, through the verbs on a real tree: the tree's depth
(``fractal init --max-depth``, 2 by default), the parent's levels minus one, a share of a
capped parent's remaining budget for a child spawned from inside it; explicit values win."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fractal.errors import FractalError, InvalidValue
from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store.ledger import Ledger
from tests.helpers import make_repo
from tests.trees import run_cli


def _config(repo: Path, branch: str) -> dict[str, object]:
    path = repo / ".worktrees" / branch / ".fractal" / branch / "config.json"
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _root_config(repo: Path) -> dict[str, object]:
    data = json.loads((repo / ".fractal" / "main" / "config.json").read_text())
    assert isinstance(data, dict)
    return data


def test_by_default_a_tree_allows_a_lead_and_its_children(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    init_tree(repo, agent="true")
    assert _root_config(repo)["max_depth"] == 2
    init_node(open_context(repo), "lead", {"max_cost": 9.0, "max_children": 3})
    lead = open_context(repo / ".worktrees" / "main.lead")
    init_node(lead, "kid", {})
    init_node(lead, "told", {"max_cost": 1.0, "max_depth": 0, "max_children": 0})
    assert (_config(repo, "main.lead")["max_depth"], _config(repo, "main.lead.kid")["max_depth"]) \
        == (1, 0)
    assert _config(repo, "main.lead.kid")["max_cost"] == 3.0  # $9 left / max_children 3
    assert _config(repo, "main.lead.kid")["reserve_budget"] == 0.3
    assert Ledger(repo / ".fractal" / "main" / "fractal.db").node("main.lead.kid").max_cost == 3.0
    assert _config(repo, "main.lead.told")["max_cost"] == 1.0  # explicit values win
    with pytest.raises(FractalError, match="max_depth"):
        init_node(open_context(repo / ".worktrees" / "main.lead.kid"), "deeper", {})
    with pytest.raises(FractalError, match=r"give main\.lead\.op a --max-cost"):
        init_node(open_context(repo), "op", {}, parent="lead")  # the operator states it


def test_init_max_depth_sets_the_trees_levels(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    out = run_cli(["init", "--max-depth", "3"], cwd=repo)
    assert out.returncode == 0, out.stderr
    assert _root_config(repo)["max_depth"] == 3
    init_node(open_context(repo), "a", {})
    init_node(open_context(repo), "b", {}, parent="a")
    init_node(open_context(repo), "c", {}, parent="a.b")
    assert [_config(repo, b)["max_depth"] for b in ("main.a", "main.a.b", "main.a.b.c")] == [
        2, 1, 0]
    init_tree(repo, max_depth="unlimited")
    assert _root_config(repo)["max_depth"] is None
    init_node(open_context(repo), "free", {})
    assert _config(repo, "main.free")["max_depth"] is None
    init_tree(repo)  # a second init keeps the tree's own value
    assert _root_config(repo)["max_depth"] is None
    with pytest.raises(InvalidValue, match="at least 1"):
        init_tree(repo, max_depth="0")
    bad = run_cli(["init", "--max-depth", "deep"], cwd=repo, check=False)
    assert bad.returncode == 1 and "`unlimited`" in bad.stderr


def test_a_pool_needs_a_level_for_its_workers(tmp_path: Path) -> None:
    """A pool node gets the one level its workers need; under a lead whose levels are all
    used (a default tree), the pool is refused before anything is made, naming the cap."""
    from fractal.lifecycle.pool import create_pool

    repo = tmp_path / "repo"
    make_repo(repo)
    init_tree(repo, agent="true")
    init_node(open_context(repo), "lead", {})
    inside = open_context(repo / ".worktrees" / "main.lead")
    with pytest.raises(FractalError, match=r"a pool's workers are one level below it, and "
                                           r"main\.lead allows descendants 1 level\(s\) deep"):
        create_pool(inside, "items", "a\nb\n", "do it", None, {})
    assert not (repo / ".worktrees" / "main.lead.items").exists()
    create_pool(open_context(repo), "items", "a\nb\n", "do it", None, {})
    assert _config(repo, "main.items")["max_depth"] == 1
