"""seedcommit.py: node init's seed commit is the commit a backstop would make there."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.workspace.backstop import backstop_commit
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.git import branch_tip, head_sha
from fractal.workspace.seedcommit import seed_commit
from fractal.workspace.worktrees import add_worktree, set_identity
from tests.helpers import git


def _fresh(repo: Path, branch: str, files: dict[str, str]) -> Path:
    wt = repo / ".worktrees" / branch
    add_worktree(repo, branch, wt, "main")
    set_identity(wt, branch)
    for rel, text in files.items():
        (wt / rel).parent.mkdir(parents=True, exist_ok=True)
        (wt / rel).write_text(text)
    return wt


SEEDS = {
    ".fractal/x/NODE.md": "# task\n",
    ".fractal/x/steps/00-PREPARE.md": "prepare\n",
    ".fractal/x/config.json": "{}\n",
    ".fractal/x/supervisor.log": "an artifact\n",  # never committed
    ".fractal/x/.claude/settings.json": "{}\n",  # an agent home: never committed
    **{f".fractal/x/plans/p{n:02d}.md": f"{n}\n" for n in range(25)},  # stat capped
}


def _commit_text(wt: Path) -> tuple[str, str, str]:
    """(tree sha, author name, message) of HEAD."""
    tree, author, message = git(wt, "log", "-1", "--format=%T%x00%an%x00%B").split("\0")
    return tree, author, message


def test_seed_commit_matches_the_backstop_commit(repo: Path) -> None:
    seeded = _fresh(repo, "main.a", SEEDS)
    backstopped = _fresh(repo, "main.b", SEEDS)
    assert seed_commit(seeded, "main.x: init (node seed)")
    backstop_commit(backstopped, subject="main.x: init (node seed)")
    tree, author, message = _commit_text(seeded)
    assert (tree, message) == _commit_text(backstopped)[::2]
    assert author == "main.a"
    assert "... 8 more files" in message
    assert git(seeded, "status", "--porcelain") == git(backstopped, "status", "--porcelain")
    assert "supervisor.log" not in git(seeded, "show", "--name-only", "--format=", "HEAD")


def test_seed_commit_of_a_rename_and_odd_names_matches_the_backstop(repo: Path) -> None:
    """A fork that carried files the seed moves and replaces (git sees renames), with
    names the stat quotes."""
    files = {"old/NODE.md": "# a long enough task text to be seen as a rename\n" * 5,
             "d/\u00e9 \u00fc.md": "x\n"}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "carried")
    made = []
    for branch in ("main.a", "main.b"):
        wt = _fresh(repo, branch, {})
        git(wt, "mv", "old", "new")
        (wt / "d" / "\u00e9 \u00fc.md").write_text("y\n")
        made.append(wt)
    assert seed_commit(made[0], "main.x: init (node seed)")
    backstop_commit(made[1], subject="main.x: init (node seed)")
    seeded, backstopped = _commit_text(made[0]), _commit_text(made[1])
    assert (seeded[0], seeded[2]) == (backstopped[0], backstopped[2])
    assert "=>" in seeded[2] and "\\303\\251" in seeded[2]


def test_seed_commit_with_nothing_new_commits_nothing(repo: Path) -> None:
    wt = _fresh(repo, "main.a", {})
    before = head_sha(wt)
    assert seed_commit(wt, "main.a: init (node seed)") is False
    assert head_sha(wt) == before


def test_seed_commit_refuses_conflict_markers(repo: Path) -> None:
    wt = _fresh(repo, "main.a", {".fractal/main.a/NODE.md":
                                 "<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> other\n"})
    before = head_sha(wt)
    with pytest.raises(UnresolvedConflict, match=r"NODE\.md"):
        seed_commit(wt, "main.a: init (node seed)")
    assert head_sha(wt) == before


def test_branch_tip_reads_loose_and_packed_refs(repo: Path) -> None:
    sha = head_sha(repo, "main")
    assert branch_tip(repo, "main") == sha
    git(repo, "pack-refs", "--all")
    assert branch_tip(repo, "main") == sha
