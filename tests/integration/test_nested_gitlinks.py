"""Which gitlink directories hold history a removed worktree would lose
(``workspace.nested.gitlinks_holding_history``), on a real directory tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.workspace.nested import gitlinks_holding_history


def _lay(sub: Path, kind: str) -> None:
    if kind == "link":
        (sub.parent / "elsewhere").mkdir()
        (sub.parent / "elsewhere" / "HEAD").write_text("ref: refs/heads/main\n")
        sub.symlink_to(sub.parent / "elsewhere")
        return
    sub.mkdir()
    if kind == "dot-git-dir":
        (sub / ".git").mkdir()
    elif kind == "dot-git-file":
        (sub / ".git").write_text("gitdir: ../.git/modules/sub\n")
    elif kind == "bare":  # what `git clone --bare` leaves: no .git, the repository itself
        (sub / "HEAD").write_text("ref: refs/heads/main\n")
        (sub / "objects").mkdir()
        (sub / "refs").mkdir()


@pytest.mark.parametrize(("kind", "held"), [
    ("empty", False),  # a submodule never checked out: nothing to lose
    ("dot-git-dir", True),
    ("dot-git-file", True),
    ("bare", True),
    ("link", False),  # a link is never followed; it is not the worktree's content
])
def test_a_gitlink_directory_holding_anything_holds_history(tmp_path: Path, kind: str,
                                                            held: bool) -> None:
    _lay(tmp_path / "sub", kind)
    assert gitlinks_holding_history(tmp_path, ["sub", "missing"]) == (["sub"] if held else [])
