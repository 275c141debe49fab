"""Attack (the fourth review's case 4): a sandboxed agent commits a nested repository as a
gitlink, registered in ``.gitmodules``, its history only in ``sub/.git``. ``node retire
--force`` and ``node delete --force`` succeeded: the rescue ref held the gitlink's bare
commit id, which exists nowhere once the worktree is gone. Now both refuse, even forced,
naming the path and how to save it, and remove nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
env = dict(os.environ)
for name in ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"):
    env.pop(name, None)  # the nested repository keeps its objects in sub/.git
def nest():
    os.makedirs("sub")
    with open("sub/f", "w") as fh:
        fh.write("only here\\n")
    for args in (["init", "-q", "-b", "main"], ["add", "f"],
                 ["-c", "user.name=M", "-c", "user.email=m@x", "commit", "-q", "-m", "s"]):
        subprocess.run(["git", *args], cwd="sub", env=env, check=True)
    with open(".gitmodules", "w") as fh:
        fh.write('[submodule "sub"]\\n\\tpath = sub\\n\\turl = ./sub\\n')
    subprocess.run(["git", "add", "sub", ".gitmodules"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "b: sub as a gitlink"], check=True)
    return subprocess.run(["git", "ls-tree", "HEAD", "sub"], check=True, capture_output=True,
                          text=True).stdout
attempt("nest", nest)
"""


def test_a_forced_retire_or_delete_refuses_a_committed_nested_repository(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    report_path = hostile_node(tree, tmp_path, ATTACKS, {})
    tree.cli("node", "start", "a.b")
    tree.wait_settled("a.b", timeout=300)
    report = read_report(report_path)
    assert report["nest"]["ok"] is True and "160000 commit" in str(report["nest"]["detail"])
    sub = tree.worktree("a.b") / "sub"
    history = git(sub, "rev-parse", "HEAD")
    for verb in ("retire", "delete"):
        out = tree.cli("node", verb, "a.b", "--force", check=False)
        assert out.returncode != 0, out.stdout
        assert "sub is a nested git repository committed (or staged) as a gitlink" in out.stderr
        assert "git rm --cached sub" in out.stderr
        assert git(sub, "rev-parse", "HEAD") == history  # its history is still there
        assert (sub / "f").read_text() == "only here\n"
    assert git(tree.repo, "for-each-ref", "refs/fractal/rescue/main.a.b/") == ""
    # the way out the refusal names: the files committed, the nested history moved out
    git(tree.worktree("a.b"), "rm", "-q", "--cached", "sub")
    (sub / ".git").rename(tmp_path / "sub.git")
    git(tree.worktree("a.b"), "add", "sub")
    git(tree.worktree("a.b"), "commit", "-q", "-m", "sub's files")
    out = tree.cli("node", "delete", "a.b", "--force", check=False)
    assert out.returncode == 0, out.stderr
    refs = git(tree.repo, "for-each-ref", "--format=%(refname)", "refs/fractal/rescue/main.a.b/")
    assert git(tree.repo, "show", f"{refs}:sub/f") == "only here"
