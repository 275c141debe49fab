"""The gate notice's diffstat on real git: commits, edits and new files against the fork
point, node directories left out, the real index untouched."""

from __future__ import annotations

from pathlib import Path

from fractal.workspace.diffstat import STAT_LINES, fork_diffstat
from tests.helpers import git, make_repo


def _child(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "main.a")
    return repo


def test_nothing_changed_is_empty(tmp_path: Path) -> None:
    assert fork_diffstat(_child(tmp_path), "main") == ""


def test_commits_edits_and_new_files_count_node_dirs_do_not(tmp_path: Path) -> None:
    wt = _child(tmp_path)
    (wt / "lib.py").write_text("x = 1\n")
    git(wt, "add", "lib.py")
    git(wt, "commit", "-q", "-m", "lib")
    (wt / "README.md").write_text("sample project\nmore\n")
    (wt / "new.txt").write_text("a\nb\n")
    (wt / ".fractal" / "main.a").mkdir(parents=True)
    (wt / ".fractal" / "main.a" / "NODE.md").write_text("# task\n")
    before = git(wt, "status", "--porcelain")
    stat = fork_diffstat(wt, "main").splitlines()
    assert [line.split("|")[0].strip() for line in stat[:-1]] == ["README.md", "lib.py",
                                                                  "new.txt"]
    assert stat[-1].strip() == "3 files changed, 4 insertions(+)"
    assert git(wt, "status", "--porcelain") == before  # the real index is untouched


def test_a_long_diffstat_is_capped(tmp_path: Path) -> None:
    wt = _child(tmp_path)
    for i in range(STAT_LINES + 5):
        (wt / f"f{i:02d}.txt").write_text("x\n")
    stat = fork_diffstat(wt, "main").splitlines()
    assert len(stat) == STAT_LINES + 2
    assert stat[-2].strip() == "... 5 more files"


def test_an_unknown_parent_is_explained_not_raised(tmp_path: Path) -> None:
    assert fork_diffstat(_child(tmp_path), "nope").startswith("(no diffstat: ")
