"""A sandboxed agent's ``fractal commit`` (asked for through its relay) runs the user's
commit hooks, those of the repository's own config (``.git/hooks`` here), inside the
node's sandbox (issue 29): a pre-commit hook that refuses stops the commit with its
words, one that passes lets it land, what the hook tries to write outside the node's
writable paths never appears, and no warning about fractal's own ``core.hooksPath``
override is printed. On the code before, the hook never ran for such a commit and every
commit warned "core.hooksPath /dev/null is not a directory"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

COMMANDS = """
def fractal(*args):
    done = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stdout}{done.stderr}")
    return done.stdout + done.stderr

def refused():
    with open("work.txt", "w") as fh:
        fh.write("work\\n")
    with open("block", "w") as fh:
        fh.write("")
    return fractal("commit", "the blocked work")

def passed():
    os.remove("block")
    return fractal("commit", "the hooked work")

attempt("refused", refused)
attempt("passed", passed)
"""

HOOK = """#!/bin/sh
echo "pre-commit ran" >> "{outside}" 2>/dev/null
if [ -f block ]; then echo "hook refused: block is present"; exit 1; fi
exit 0
"""


def test_an_agents_relayed_commit_runs_the_users_hooks_in_its_sandbox(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    report_path = hostile_node(tree, tmp_path, COMMANDS, {})
    outside = tree.repo / "hook-outside.txt"  # the main checkout: read-only inside
    hook = tree.repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(HOOK.format(outside=outside))
    hook.chmod(0o755)
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    assert report["refused"]["ok"] is False, report["refused"]
    assert "hook refused: block is present" in str(report["refused"]["detail"])
    assert report["passed"]["ok"] is True, report["passed"]
    assert "hooksPath" not in str(report["passed"]["detail"]), report["passed"]
    subjects = git(tree.repo, "log", "--format=%s", "main.a.b")
    assert "the hooked work" in subjects and "the blocked work" not in subjects
    assert not outside.exists()  # the hook ran, inside the node's sandbox


PUSH_COMMANDS = """
def push():
    with open("work.txt", "w") as fh:
        fh.write("work\\n")
    done = subprocess.run([sys.executable, "-m", "fractal", "commit", "the pushed work"],
                          capture_output=True, text=True, timeout=120)
    return f"exit {done.returncode}: {done.stdout}{done.stderr}"

attempt("push", push)
"""

PRE_PUSH = """#!/bin/sh
echo "pre-push ran" >> "{outside}" 2>/dev/null
echo "pre-push hook says no"
exit 1
"""


def test_an_agents_relayed_push_runs_the_users_pre_push_hook_in_its_sandbox(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    """The push of that commit runs the user's pre-push hook inside the sandbox too: its
    refusal is the push's warning (the commit stands), and its write outside is lost."""
    tree = sandboxed_tree
    origin = tree.repo / "origin.git"  # seen (read-only) inside the sandbox
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(tree.repo, "remote", "add", "origin", str(origin))
    report_path = hostile_node(tree, tmp_path, PUSH_COMMANDS, {})
    outside = tree.repo / "hook-outside.txt"
    hook = tree.repo / ".git" / "hooks" / "pre-push"
    hook.write_text(PRE_PUSH.format(outside=outside))
    hook.chmod(0o755)
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    detail = str(read_report(report_path)["push"]["detail"])
    assert detail.startswith("exit 0: "), detail
    assert "push to origin failed" in detail and "pre-push hook says no" in detail, detail
    assert "the pushed work" in git(tree.repo, "log", "--format=%s", "main.a.b")
    assert not outside.exists()
