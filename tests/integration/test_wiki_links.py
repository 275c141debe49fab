"""fractal never writes a wiki index through a symbolic link in a worktree: the commit's
wiki step refuses, ``node init`` skips such a wiki with a warning (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.workspace.commit_types import CommitMode
from fractal.workspace.wiki import WikiLinked, ensure_wiki, refresh_wikis, update_wiki
from tests.helpers import git, make_repo
from tests.trees import run_cli_as


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside any worktree, holding one page."""
    target = tmp_path / "outside"
    target.mkdir()
    (target / "page.md").write_text("# Page\n\ntext\n")
    return target


def _untouched(target: Path) -> None:
    assert sorted(p.name for p in target.iterdir()) == ["page.md"]


def test_a_linked_wiki_is_refused_by_the_commits_wiki_step(tmp_path: Path,
                                                            outside: Path) -> None:
    worktree = tmp_path / "wt"
    (worktree / ".fractal" / "main.a").mkdir(parents=True)
    (worktree / "wiki").symlink_to(outside)
    with pytest.raises(WikiLinked, match="wiki is a symbolic link"):
        refresh_wikis(worktree, worktree / ".fractal" / "main.a", CommitMode.ITERATION)
    _untouched(outside)


def test_a_linked_index_or_parent_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                   outside: Path) -> None:
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    (wiki / "_index.md").symlink_to(outside / "page.md")
    with pytest.raises(WikiLinked):
        update_wiki(wiki)
    assert (outside / "page.md").read_text() == "# Page\n\ntext\n"
    top = tmp_path / "top"
    top.mkdir()
    (top / "link").symlink_to(outside)
    with pytest.raises(WikiLinked, match="link is a symbolic link"):
        update_wiki(top / "link" / "memory", top=top)
    _untouched(outside)


def test_ensure_wiki_skips_a_link(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "wiki").symlink_to(outside)
    assert ensure_wiki(tmp_path / "wiki", "Project wiki") is False
    _untouched(outside)


def test_node_init_from_a_branch_holding_a_wiki_link_writes_nothing_through_it(
        tmp_path: Path, outside: Path) -> None:
    """The fork checks the link out; seeding the child's wikis must not follow it (node
    init runs outside any sandbox, relayed or not)."""
    repo = tmp_path / "repo"
    make_repo(repo)
    for args in (["init"], ["node", "init", "a"]):
        out = run_cli_as(repo, *args)
        assert out.returncode == 0, out.stderr
    parent = repo / ".worktrees" / "main.a"
    git(parent, "rm", "-r", "-q", "--cached", "--ignore-unmatch", "wiki")
    if (parent / "wiki").exists():
        (parent / "wiki").rename(tmp_path / "old-wiki")
    (parent / "wiki").symlink_to(outside)
    git(parent, "add", "wiki")
    git(parent, "commit", "-q", "--no-verify", "-m", "a wiki link")
    out = run_cli_as(repo, "node", "init", "b", "--parent", "a")
    # git itself refuses the seed commit's pathspec under the link ("beyond a symbolic
    # link"); whichever way node init ends, nothing was written through the link
    assert out.returncode != 0 and "symbolic link" in out.stderr, out.stderr
    _untouched(outside)
