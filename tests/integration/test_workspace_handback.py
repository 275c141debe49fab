"""A hand-back on an explicit merge base against ``git merge --no-commit`` itself: real git.

``hand_back_merge`` with a ``base`` computes the merge with ``git merge-tree`` and lays the
result into the child's worktree. Each case below builds the same history twice, merges it
once with git and once by hand-back, and holds the two worktrees equal: the index with its
conflict stages, every file's content, mode and kind. Then git itself must accept the state
as a merge in progress: ``git status``, ``git diff --cc``, ``git merge --abort``,
``git commit``. Refusals (untracked or ignored files in the way, staged changes, an
unconcluded merge) must leave the worktree as it was.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.workspace import handback_layout as layout
from fractal.workspace import merge as merge_module
from fractal.workspace.merge import LandedMerge, hand_back_merge, merge_base
from tests.helpers import copy_of_tree, git, make_repo

# a file's content; LINK: a symlink to the text; EXEC: an executable file; None: deleted
Spec = str | bytes | tuple[str, str | bytes] | None
EXEC, LINK = "exec", "link"


def _write(where: Path, changes: dict[str, Spec], *, force: bool = True) -> None:
    for rel, spec in changes.items():
        path = where / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir() and spec is not None:
            for sub in sorted(path.rglob("*"), reverse=True):
                sub.unlink() if not sub.is_dir() or sub.is_symlink() else sub.rmdir()
            path.rmdir()
        if spec is None:
            git(where, "rm", "-q", "-r", "--cached", "--ignore-unmatch", "--", rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        kind, body = spec if isinstance(spec, tuple) else ("file", spec)
        if kind == LINK:
            os.symlink(body, path)
        else:
            path.write_bytes(body.encode() if isinstance(body, str) else body)
            if kind == EXEC:
                path.chmod(path.stat().st_mode | stat.S_IXUSR)
    git(where, "add", "-A", *(["-f"] if force else []))  # a case may commit an ignored file
    git(where, "commit", "-q", "--allow-empty", "-m", "change")


@dataclass(frozen=True)
class Case:
    name: str
    base: dict[str, Spec]
    child: dict[str, Spec]
    target: dict[str, Spec]
    conflicts: tuple[str, ...] = field(default=())


BIN_A, BIN_B, BIN_C = b"\0\1binary base\n", b"\0\2binary child\n", b"\0\3binary target\n"
CASES = [
    Case("text", {"f.txt": "base\n"}, {"f.txt": "child\n"}, {"f.txt": "target\n"},
         ("f.txt",)),
    Case("clean", {"f.txt": "a\nb\nc\nd\ne\n", "g": "g\n"},
         {"f.txt": "A\nb\nc\nd\ne\n", "c/new": "c\n"},
         {"f.txt": "a\nb\nc\nd\nE\n", "t/new": "t\n", "g": None}),
    Case("binary", {"b.bin": BIN_A}, {"b.bin": BIN_B}, {"b.bin": BIN_C}, ("b.bin",)),
    Case("exec bit", {"run.sh": "echo 1\n"}, {"other": "x\n"},
         {"run.sh": (EXEC, "echo 1\n")}),
    Case("exec bit and content", {"run.sh": "a\nb\nc\n"}, {"run.sh": "A\nb\nc\n"},
         {"run.sh": (EXEC, "a\nb\nC\n")}),
    Case("symlinks", {"l": (LINK, "one"), "m": (LINK, "one")},
         {"l": (LINK, "two"), "new-link": (LINK, "x")}, {"l": (LINK, "three"), "m": "plain\n"},
         ("l",)),
    Case("modify/delete", {"f": "base\n"}, {"f": "child edit\n"}, {"f": None}, ("f",)),
    Case("delete/modify", {"f": "base\n"}, {"f": None}, {"f": "target edit\n"}, ("f",)),
    Case("rename/edit", {"old.txt": "1\n2\n3\n4\n5\n6\n7\n8\n"},
         {"old.txt": "1\n2\n3\n4\n5\n6\n7\nEIGHT\n"},
         {"old.txt": None, "new.txt": "ONE\n2\n3\n4\n5\n6\n7\n8\n"}),
    Case("file to directory", {"d": "file\n"}, {"d": "child edit\n"}, {"d": None,
                                                                     "d/x": "dir\n"}, ("d",)),
    Case("directory to file", {"d/x": "x\n"}, {"d/x": "edit\n"}, {"d": "now a file\n"},
         ("d/x",)),
    Case("odd names", {"a b.txt": "base\n", "ünï.txt": "base\n", "new\nline": "base\n"},
         {"a b.txt": "child\n", "ünï.txt": "child\n", "new\nline": "child\n"},
         {"a b.txt": "target\n", "ünï.txt": "target\n", "new\nline": "target\n"},
         ("a b.txt", "new\nline", "ünï.txt")),
    Case("add/add", {}, {"both": "child\n"}, {"both": "target\n"}, ("both",)),
]


_TIPS: dict[str, tuple[str, str]] = {}


def _history(tmp_path: Path, case: Case) -> tuple[Path, Path, Path, str, str]:
    """(repo, git's worktree, hand-back's worktree, target tip, base) for ``case``: a copy
    of the history built once per case and test process (``copy_of_tree``), built in
    place for a case only one test uses."""
    if case not in CASES:
        return _build_history(tmp_path, case)
    root = copy_of_tree(tmp_path / "h", f"hostile-{CASES.index(case)}",
                        lambda where: _TIPS.setdefault(
                            case.name, _build_history(where, case)[3:]))
    # a copy's files are new inodes: refresh the index's stat data, as a checkout leaves it
    # (the hand-back's read-tree -m -u refuses entries it cannot tell are up to date)
    git(root / "by us", "update-index", "-q", "--refresh")
    return (root / "repo", root / "by git", root / "by us", *_TIPS[case.name])


def _build_history(tmp_path: Path, case: Case) -> tuple[Path, Path, Path, str, str]:
    repo = make_repo(tmp_path / "repo")
    _write(repo, case.base)
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "child")
    git(repo, "branch", "target")
    wt_target = tmp_path / "target"
    git(repo, "worktree", "add", "-q", str(wt_target), "target")
    _write(wt_target, case.target)
    by_git, by_us = tmp_path / "by git", tmp_path / "by us"
    git(repo, "worktree", "add", "-q", str(by_git), "child")
    _write(by_git, case.child)
    git(repo, "branch", "child2", "child")
    git(repo, "worktree", "add", "-q", str(by_us), "child2")
    return repo, by_git, by_us, git(repo, "rev-parse", "target"), base


def _snapshot(where: Path) -> dict[str, tuple[str, bytes]]:
    out: dict[str, tuple[str, bytes]] = {}
    for path in sorted(where.rglob("*")):
        rel = path.relative_to(where).as_posix()
        if rel == ".git" or (path.is_dir() and not path.is_symlink()):
            continue
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path).encode())
        else:
            kind = "exec" if path.stat().st_mode & stat.S_IXUSR else "file"
            out[rel] = (kind, path.read_bytes())
    return out


def _stages(where: Path) -> list[str]:
    return sorted(git(where, "ls-files", "-s", "-z").split("\0"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_hand_back_lays_out_what_git_merge_no_commit_does(tmp_path: Path, case: Case) -> None:
    _repo, by_git, by_us, target, base = _history(tmp_path, case)
    if case.conflicts:
        with pytest.raises(subprocess.CalledProcessError):
            git(by_git, "merge", "--no-ff", "--no-commit", target)
    else:
        git(by_git, "merge", "--no-ff", "--no-commit", target)
    left = hand_back_merge(by_us, target, "merge target", base=base)
    unmerged = git(by_git, "diff", "--name-only", "-z", "--diff-filter=U").split("\0")
    assert sorted(left) == sorted(p for p in unmerged if p)
    assert bool(left) == bool(case.conflicts)
    assert _stages(by_us) == _stages(by_git)
    assert _snapshot(by_us) == _snapshot(by_git)
    # git reads it as a merge in progress, the same one
    assert git(by_us, "rev-parse", "MERGE_HEAD") == target
    assert git(by_us, "status", "--porcelain=v1", "-z") == git(by_git, "status",
                                                                "--porcelain=v1", "-z")
    assert git(by_us, "diff", "--cc") == git(by_git, "diff", "--cc")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_aborted_hand_back_leaves_the_child_as_it_was(tmp_path: Path, case: Case) -> None:
    _repo, _by_git, by_us, target, base = _history(tmp_path, case)
    before, head = _snapshot(by_us), git(by_us, "rev-parse", "HEAD")
    hand_back_merge(by_us, target, "merge target", base=base)
    git(by_us, "merge", "--abort")
    assert _snapshot(by_us) == before
    assert git(by_us, "rev-parse", "HEAD") == head
    assert git(by_us, "status", "--porcelain") == ""


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_resolved_hand_back_commits_as_a_real_merge(tmp_path: Path, case: Case) -> None:
    _repo, _by_git, by_us, target, base = _history(tmp_path, case)
    head = git(by_us, "rev-parse", "HEAD")
    hand_back_merge(by_us, target, "merge target to resolve", base=base)
    git(by_us, "add", "-A")
    git(by_us, "commit", "-q", "--no-edit")
    parents = git(by_us, "rev-list", "--parents", "-n", "1", "HEAD").split()
    assert parents[1:] == [head, target]
    assert git(by_us, "log", "-1", "--format=%s") == "merge target to resolve"
    assert git(by_us, "status", "--porcelain") == ""


def _one(tmp_path: Path) -> tuple[Path, str, str]:
    case = CASES[0]
    _repo, _by_git, by_us, target, base = _history(tmp_path, case)
    return by_us, target, base


def _refused_unchanged(by_us: Path, target: str, base: str,
                       check: Callable[[str], bool] = lambda _m: True) -> None:
    before, head = _snapshot(by_us), git(by_us, "rev-parse", "HEAD")
    status = git(by_us, "status", "--porcelain", "--ignored")
    with pytest.raises(GitError) as caught:
        hand_back_merge(by_us, target, "merge target", base=base)
    assert check(str(caught.value)), str(caught.value)
    assert _snapshot(by_us) == before
    assert git(by_us, "rev-parse", "HEAD") == head
    assert git(by_us, "status", "--porcelain", "--ignored") == status


def test_an_untracked_file_the_merge_would_overwrite_refuses_it(tmp_path: Path) -> None:
    case = Case("untracked", {"f": "base\n"}, {"f": "child\n"},
                {"f": "target\n", "new.txt": "target's\n"}, ("f",))
    _repo, _g, by_us, target, base = _history(tmp_path, case)
    (by_us / "new.txt").write_text("the child's untracked work\n")
    _refused_unchanged(by_us, target, base, lambda m: "new.txt" in m)
    assert (by_us / "new.txt").read_text() == "the child's untracked work\n"


def test_an_ignored_file_the_merge_would_overwrite_refuses_it(tmp_path: Path) -> None:
    case = Case("ignored", {"f": "base\n", ".gitignore": "*.log\n"}, {"f": "child\n"},
                {"f": "target\n", "kept.log": "target's\n"}, ("f",))
    _repo, _g, by_us, target, base = _history(tmp_path, case)
    (by_us / "kept.log").write_text("the child's ignored file\n")
    _refused_unchanged(by_us, target, base)
    assert (by_us / "kept.log").read_text() == "the child's ignored file\n"


def test_staged_changes_refuse_it(tmp_path: Path) -> None:
    by_us, target, base = _one(tmp_path)
    (by_us / "staged.txt").write_text("staged work\n")
    git(by_us, "add", "staged.txt")
    _refused_unchanged(by_us, target, base, lambda m: "staged.txt" in m)


def test_an_edit_to_a_file_the_merge_changes_refuses_it(tmp_path: Path) -> None:
    by_us, target, base = _one(tmp_path)
    (by_us / "f.txt").write_text("unsaved edit\n")
    _refused_unchanged(by_us, target, base, lambda m: "f.txt" in m)


def test_a_second_hand_back_before_the_first_is_resolved_refuses(tmp_path: Path) -> None:
    by_us, target, base = _one(tmp_path)
    hand_back_merge(by_us, target, "merge target", base=base)
    _refused_unchanged(by_us, target, base)
    assert git(by_us, "rev-parse", "MERGE_HEAD") == target


def test_a_clean_hand_back_then_merge_continue_commits(tmp_path: Path) -> None:
    _repo, _g, by_us, target, base = _history(tmp_path, CASES[1])
    head = git(by_us, "rev-parse", "HEAD")
    assert hand_back_merge(by_us, target, "merge target", base=base) == []
    env = {**os.environ, "GIT_EDITOR": "true"}
    subprocess.run(["git", "merge", "--continue"], cwd=by_us, env=env, check=True,
                   capture_output=True)
    assert git(by_us, "rev-list", "--parents", "-n", "1", "HEAD").split()[1:] == [head, target]


def test_a_hand_back_of_2000_files_leaves_what_git_merge_leaves(tmp_path: Path) -> None:
    """A big tree lays out exactly as ``git merge`` would (its time beside git's is a
    benchmark figure, never a pass/fail here: 0.44 s against 0.375 s on a quiet machine)."""
    base_files: dict[str, Spec] = {f"d{i // 100}/f{i}.txt": f"{i}\n" for i in range(2000)}
    child = {f"d{i // 100}/f{i}.txt": f"{i} child\n" for i in range(0, 2000, 2)}
    target: dict[str, Spec] = {f"d{i // 100}/f{i}.txt": f"{i} target\n"
                               for i in range(1, 2000, 2)}
    target["d0/f0.txt"] = "0 target\n"
    case = Case("large", base_files, child, target, ("d0/f0.txt",))
    _repo, by_git, by_us, tip, base = _history(tmp_path, case)
    with pytest.raises(subprocess.CalledProcessError):
        git(by_git, "merge", "--no-ff", "--no-commit", tip)
    assert hand_back_merge(by_us, tip, "merge target", base=base) == ["d0/f0.txt"]
    assert _stages(by_us) == _stages(by_git)


class _Interrupted(BaseException):
    """What a Ctrl-C in the middle of a hand-back raises."""


def test_a_hand_back_interrupted_after_the_files_never_stages_conflict_markers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_us, target, base = _one(tmp_path)
    head = git(by_us, "rev-parse", "HEAD")
    real = layout.run_git
    seen: list[str] = []

    def interrupt_at_the_stages(args: list[str], *rest: object, **kw: object) -> object:
        seen.append(args[0])
        if args[0] == "update-index":
            raise _Interrupted
        return real(args, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(layout, "run_git", interrupt_at_the_stages)
    with pytest.raises(_Interrupted):
        hand_back_merge(by_us, target, "merge target", base=base)
    monkeypatch.undo()
    assert "read-tree" in seen  # the files were written
    # the index is still HEAD's: nothing staged, no merge to commit by mistake
    assert git(by_us, "diff", "--cached", "--name-only", "HEAD") == ""
    with pytest.raises(subprocess.CalledProcessError):
        git(by_us, "rev-parse", "-q", "--verify", "MERGE_HEAD")
    index = Path(git(by_us, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    assert index.is_file() and not list(index.parent.glob("*.fractal-hand-back*"))
    git(by_us, "checkout", "--", ".")  # what the refusal's "commit or drop" leads to
    assert git(by_us, "status", "--porcelain") == ""
    assert git(by_us, "rev-parse", "HEAD") == head
    assert hand_back_merge(by_us, target, "merge target", base=base) == ["f.txt"]


def test_a_hand_back_interrupted_before_merge_head_cannot_be_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_us, target, base = _one(tmp_path)
    real = merge_module.replace_file

    def interrupt_at_merge_head(path: Path, data: bytes, mode: int = 0o644) -> None:
        if path.name == "MERGE_HEAD":
            raise _Interrupted
        real(path, data, mode)

    monkeypatch.setattr(merge_module, "replace_file", interrupt_at_merge_head)
    with pytest.raises(_Interrupted):
        hand_back_merge(by_us, target, "merge target", base=base)
    monkeypatch.undo()
    assert git(by_us, "ls-files", "-u")  # the conflict is in the index, unresolved
    with pytest.raises(subprocess.CalledProcessError):
        git(by_us, "commit", "-q", "-m", "markers")  # git refuses to commit it
    git(by_us, "reset", "-q", "--merge")
    assert git(by_us, "status", "--porcelain") == ""


def test_a_landed_merge_whose_commits_are_gone_falls_back_to_gits_base(tmp_path: Path) -> None:
    repo, _g, by_us, target, _base = _history(tmp_path, CASES[0])
    child = git(by_us, "rev-parse", "HEAD")
    gone = LandedMerge("0" * 40, "1" * 40)  # a rewritten branch: the row names lost commits
    assert merge_base(repo, child, target, gone) is None
    other = git(repo, "commit-tree", f"{target}^{{tree}}", "-m", "elsewhere")
    assert merge_base(repo, child, target, LandedMerge(other, target)) is None


def test_a_child_with_no_advance_hands_back_on_gits_own_base(tmp_path: Path) -> None:
    repo, by_git, by_us, target, _base = _history(tmp_path, CASES[0])
    assert merge_base(repo, git(by_us, "rev-parse", "HEAD"), target) is None
    with pytest.raises(subprocess.CalledProcessError):
        git(by_git, "merge", "--no-ff", "--no-commit", target)
    assert hand_back_merge(by_us, target, "merge target") == ["f.txt"]
    assert _stages(by_us) == _stages(by_git) and _snapshot(by_us) == _snapshot(by_git)


def test_node_merge_hands_back_binary_and_file_directory_conflicts_after_an_advance(
        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    tree = init_tree(repo).tree
    init_node(open_context(repo), "a", {})
    a = tree.worktree_of("main.a")
    _write(a, {"out/a.txt": "a 1\n", "img.bin": BIN_A, "d": "a file\n"}, force=False)
    assert merge_node(open_context(repo), "a").status == "merged"  # a's base advances
    _write(repo, {"own.txt": "the target's own\n", "img.bin": BIN_C, "d": None,
                  "d/x": "now a directory\n"}, force=False)
    _write(a, {"img.bin": BIN_B, "d": "a's edit\n"}, force=False)
    handed = merge_node(open_context(repo), "a", hand_back=True)
    assert handed.status == "handed-back"
    assert sorted(handed.conflicts) == ["d~HEAD", "img.bin"]
    assert (a / "own.txt").read_text() == "the target's own\n"  # nothing of the target lost
    assert (a / "d" / "x").read_text() == "now a directory\n"
    assert (a / "d~HEAD").read_text() == "a's edit\n"
    assert (a / "img.bin").read_bytes() == BIN_B
    assert sorted(set(git(a, "diff", "--name-only", "--diff-filter=U").split("\n"))) == \
        ["d~HEAD", "img.bin"]
    git(a, "checkout", "--theirs", "--", "img.bin")
    git(a, "add", "-A")
    git(a, "commit", "-q", "--no-edit")
    assert merge_node(open_context(repo), "a").status == "merged"
    assert git(repo, "show", "main:d~HEAD") == "a's edit"
    assert git(repo, "show", "main:own.txt") == "the target's own"
    assert (repo / "img.bin").read_bytes() == BIN_C


def test_an_untracked_directory_holding_what_the_merge_adds_refuses_it(tmp_path: Path) -> None:
    case = Case("untracked dir", {"f": "base\n", ".gitignore": "build/\n"}, {"f": "child\n"},
                {"f": "target\n", "build/out/x": "target's\n", "new/y": "target's\n"}, ("f",))
    _repo, _g, by_us, target, base = _history(tmp_path, case)
    (by_us / "build" / "out").mkdir(parents=True)
    (by_us / "build" / "out" / "x").write_text("the child's build\n")
    _refused_unchanged(by_us, target, base, lambda m: "build/out/x" in m)
    (by_us / "build" / "out" / "x").unlink()
    (by_us / "new").write_text("a file where the merge puts a directory\n")
    _refused_unchanged(by_us, target, base)
    assert (by_us / "new").read_text() == "a file where the merge puts a directory\n"


def test_diff3_markers_name_the_base_not_a_scratch_commit(tmp_path: Path) -> None:
    by_us, target, base = _one(tmp_path)
    git(by_us, "config", "merge.conflictStyle", "diff3")
    hand_back_merge(by_us, target, "merge target", base=base)
    lines = (by_us / "f.txt").read_text().splitlines()
    ours, parent, theirs = [ln for ln in lines if ln[:8] in ("<<<<<<< ", "||||||| ",
                                                            ">>>>>>> ")]
    assert (ours, theirs) == ("<<<<<<< HEAD", f">>>>>>> {target}")
    assert len(parent) > 12 and base.startswith(parent[8:])  # git's abbreviated base id


def test_an_ignored_file_in_the_way_refuses_a_hand_back_on_gits_own_base(
        tmp_path: Path) -> None:
    case = Case("ignored, no base", {"f": "base\n", ".gitignore": "*.log\n"}, {"f": "child\n"},
                {"f": "target\n", "kept.log": "target's\n"}, ("f",))
    _repo, _g, by_us, target, _base = _history(tmp_path, case)
    (by_us / "kept.log").write_text("the child's ignored file\n")
    before = _snapshot(by_us)
    with pytest.raises(GitError, match=r"kept\.log"):
        hand_back_merge(by_us, target, "merge target")
    assert _snapshot(by_us) == before
    with pytest.raises(subprocess.CalledProcessError):
        git(by_us, "rev-parse", "-q", "--verify", "MERGE_HEAD")
