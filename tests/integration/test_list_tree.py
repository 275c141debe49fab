"""``fractal node list --tree``: the real CLI draws the registry as a tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import make_repo
from tests.trees import run_cli


def _fractal(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), repo, check=False)


def test_list_tree_draws_ascii_when_piped(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    for args in (["init"], ["node", "init", "a"], ["node", "init", "b"],
                 ["node", "init", "x", "--parent", "a"]):
        assert _fractal(repo, *args).returncode == 0
    out = _fractal(repo, "node", "list", "--tree")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["main", "|-- o a  idle", "|   `-- o x  idle",
                                       "`-- o b  idle"]
    sub = _fractal(repo, "node", "list", "a", "--tree", "--ascii")
    assert sub.stdout.splitlines() == ["main", "`-- o a  idle", "    `-- o x  idle"]
    for args in (["node", "delete", "b"], ["node", "delete", "a", "--force"]):
        assert _fractal(repo, *args).returncode == 0, args
    assert _fractal(repo, "node", "init", "solo").returncode == 0
    single = _fractal(repo, "node", "list", "--tree")  # one top-level node: the same shape
    assert single.stdout.splitlines() == ["main", "`-- o solo  idle"]
    refused = _fractal(repo, "node", "list", "--tree", "--json")
    assert refused.returncode == 2
