"""Attack (the review's case 1): inside its sandbox, an agent makes a nested repository
whose own config holds a clean filter (with ``* filter=evil`` in its ``info/attributes``)
and registers it as a gitlink in its worktree's index. Any ``git status`` or ``git add``
that descends into it runs a ``git status`` there, which reads the nested repository's
config and runs the filter outside the sandbox, as the supervisor or the operator.
fractal's git never descends: the backstop commit, ``node retire --force``, ``node delete
--force`` and the read verbs run nothing, and the nested repository is refused with a
reason (docs/security.md, "Nested repositories")."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.helpers import git, git_with_identity, make_repo
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree, run_cli_as

pytestmark = pytest.mark.e2e

PLANT = """
def plant():
    env = {k: v for k, v in os.environ.items()
           if k not in ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES")}
    def sub_git(*args):
        subprocess.run(["git", "-C", "sub", "-c", "user.name=x", "-c", "user.email=x@x",
                        *args], check=True, env=env, capture_output=True)
    os.mkdir("sub")
    with open("sub/f", "w") as fh:
        fh.write("hi\\n")
    subprocess.run(["git", "init", "-q", "sub"], check=True, env=env, capture_output=True)
    sub_git("add", "f")
    sub_git("commit", "-qm", "s")
    sub_git("config", "filter.evil.clean", "sh -c 'echo ran >> " + FACTS["log"] + "; cat'")
    with open("sub/.git/info/attributes", "w") as fh:
        fh.write("* filter=evil\\n")
    head = subprocess.run(["git", "-C", "sub", "rev-parse", "HEAD"], check=True, env=env,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"160000,{head},sub"],
                   check=True, capture_output=True)
    os.utime("sub/f", (time.time() + 5, time.time() + 5))  # stale in the nested index
    return head
attempt("plant", plant)
"""


def _stale(worktree: Path) -> None:
    """Make the nested repository's file look changed, so a git that descends filters it."""
    later = time.time() + 60
    os.utime(worktree / "sub" / "f", (later, later))


def _nothing_ran(log: Path, after: str) -> None:
    assert not log.exists(), f"the nested repository's filter ran ({after}): {log.read_text()}"


def test_a_planted_nested_repository_runs_nothing_outside(sandboxed_tree: Tree,
                                                          tmp_path: Path) -> None:
    tree = sandboxed_tree
    log = tmp_path / "ran.log"
    report_path = hostile_node(tree, tmp_path, PLANT, {"log": str(log)})
    tree.cli("node", "start", "a.b")
    tree.wait_settled("a.b", timeout=300)
    report = read_report(report_path)
    assert report["plant"]["ok"] is True, report["plant"]
    worktree = tree.worktree("a.b")
    assert (worktree / "sub" / ".git").is_dir()
    # the backstop commit refused the gitlink, and ran nothing in it
    _nothing_ran(log, "the backstop commit")
    said = (tree.node_dir("a.b") / "supervisor.log").read_text(errors="replace")
    assert "nested git repository in sub" in said, said[-2000:]
    # the operator's read verbs
    for verb in (("node", "status", "a.b"), ("inbox",), ("node", "pending"),
                 ("node", "diff", "a.b"), ("status",)):
        _stale(worktree)
        tree.cli(*verb, check=False)
        _nothing_ran(log, " ".join(verb))
    # the operator's forced removals refuse the nested repository before touching it
    for verb in (("node", "retire", "a.b", "--force"), ("node", "delete", "a.b", "--force")):
        _stale(worktree)
        out = tree.cli(*verb, check=False)
        _nothing_ran(log, " ".join(verb))
        assert out.returncode != 0
        assert "nested git repository" in out.stderr + out.stdout, out.stderr
        assert (worktree / "sub" / "f").read_text() == "hi\n"


def _registered(tmp_path: Path) -> tuple[Path, Path]:
    """(repo, log): ``main.a`` holds a submodule ``sub`` registered in ``.gitmodules``
    with ``ignore = none`` (which outranks ``diff.ignoreSubmodules`` in any config) and
    committed, whose own config runs a filter appending to ``log``; its file looks
    changed."""
    repo = tmp_path / "repo"
    make_repo(repo)
    for args in (["init"], ["node", "init", "a"]):
        out = run_cli_as(repo, *args)
        assert out.returncode == 0, out.stderr
    child = repo / ".worktrees" / "main.a"
    sub = child / "sub"
    sub.mkdir()
    (sub / "f").write_text("hi\n")
    git(sub, "init", "-q", "-b", "main")
    git(sub, "add", "f")
    git_with_identity(sub, "commit", "-q", "-m", "s")
    log = tmp_path / "ran.log"
    git(sub, "config", "filter.evil.clean", f"sh -c 'echo ran >> {log}; cat'")
    (sub / ".git" / "info").mkdir(exist_ok=True)
    (sub / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    (child / ".gitmodules").write_text(
        '[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n')
    git(child, "update-index", "--add", "--cacheinfo",
        f"160000,{git(sub, 'rev-parse', 'HEAD')},sub")
    git(child, "add", ".gitmodules")
    git(child, "commit", "-q", "--no-verify", "-m", "a submodule")
    (child / "work.txt").write_text("work\n")
    _stale(child)
    assert not log.exists()
    return repo, log


def test_a_registered_submodule_runs_nothing_under_the_operators_verbs(
        tmp_path: Path) -> None:
    repo, log = _registered(tmp_path)
    child = repo / ".worktrees" / "main.a"
    for verb in (("node", "status", "a"), ("inbox",), ("node", "pending"),
                 ("node", "diff", "a"), ("status",), ("node", "merge", "a")):
        _stale(child)
        run_cli_as(repo, *verb)
        _nothing_ran(log, " ".join(verb))
    _stale(child)
    out = run_cli_as(child, "commit", "--init", "work")  # as the operator, in the node
    assert out.returncode == 0, out.stderr
    _nothing_ran(log, "fractal commit")
    assert git(child, "show", "HEAD:work.txt") == "work"
    for verb in (("node", "retire", "a", "--force"), ("node", "delete", "a", "--force")):
        if child.exists():
            _stale(child)
        run_cli_as(repo, *verb)
        _nothing_ran(log, " ".join(verb))
