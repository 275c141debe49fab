"""The soak agent's hand-back record, which the tree checker's ``hand-back-keeps`` reads:
a merge handed back on git's own base after an earlier merge leaves out the target's
files and is recorded so; one on the squash's base leaves out nothing. Real git."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.workspace.merge import hand_back_merge, merge_base
from tests.helpers import git, make_repo
from tests.soak import agent


def _commit(where: Path, rel: str, text: str) -> None:
    (where / rel).parent.mkdir(parents=True, exist_ok=True)
    (where / rel).write_text(text)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", f"write {rel}")


def test_the_record_names_what_a_hand_back_left_out(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo")
    tree = init_tree(repo).tree
    init_node(open_context(repo), "a", {})
    a = tree.worktree_of("main.a")
    _commit(repo, "own/1.txt", "the target's own work\n")
    _commit(a, "clash.txt", "a 1\n")
    assert merge_node(open_context(repo), "a").status == "merged"
    _commit(repo, "clash.txt", "the target's line\n")
    _commit(a, "clash.txt", "a 2\n")
    record = tmp_path / "handbacks.jsonl"
    monkeypatch.setenv("SOAK_HANDBACKS", str(record))
    monkeypatch.chdir(a)
    head, tip = git(a, "rev-parse", "HEAD"), git(repo, "rev-parse", "main")
    seen = []
    for base in (None, merge_base(repo, head, tip)):  # git's own base, then the squash's
        hand_back_merge(a, tip, "a: merge main", base=base)
        agent._resolve_conflicts("main.a")
        seen.append(json.loads(record.read_text().splitlines()[-1]))
        git(a, "reset", "-q", "--hard", head)
    assert "own/1.txt" in seen[0]["deleted"] and seen[0]["conflicts"] == ["clash.txt"]
    assert seen[1] == {"node": "main.a", "target": tip, "conflicts": ["clash.txt"],
                       "deleted": []}
