"""Attack: a node plants programs in the shared ``.git`` (a ``core.fsmonitor`` command,
hooks in ``.git/hooks``, a filter, diff and merge driver) and waits for the operator's
next verb to run them with the operator's authority. fractal's own git runs none of them;
only ``fractal commit`` (the node's own verb) runs the hooks (docs/security.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import copy_of_tree, git, make_repo
from tests.loopfakes import LoopTree, loop_tree
from tests.trees import run_cli_as

__all__ = ["loop_tree"]

HOOKS = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "post-merge",
         "pre-merge-commit", "reference-transaction", "post-index-change", "post-rewrite",
         "pre-auto-gc", "prepare-commit-msg")


def _build(repo: Path) -> None:
    """``main`` with a child ``main.a`` holding one commit of work."""
    make_repo(repo)
    for args in (["init"], ["node", "init", "a"]):
        out = run_cli_as(repo, *args)
        assert out.returncode == 0, out.stderr
    child = repo / ".worktrees" / "main.a"
    (child / "work.txt").write_text("work\n")
    git(child, "add", "work.txt")
    git(child, "commit", "-q", "-m", "work")


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """(repo, log): a tree whose ``.git`` runs ``evil.sh`` (which appends a line to
    ``log``) as its fsmonitor, as every hook and as the filter, diff and merge driver of
    every path."""
    repo = copy_of_tree(tmp_path / "repo", "security-planted", _build)
    log = tmp_path / "ran.log"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> "{log}"\ncat\n')
    evil.chmod(0o755)
    common = repo / ".git"
    for hook in HOOKS:
        (common / "hooks" / hook).write_text(f'#!/bin/sh\necho "hook {hook}" >> "{log}"\n')
        (common / "hooks" / hook).chmod(0o755)
    (common / "info").mkdir(exist_ok=True)
    (common / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n")
    for key, value in (("core.fsmonitor", str(evil)), ("filter.evil.clean", str(evil)),
                       ("filter.evil.smudge", str(evil)), ("diff.evil.textconv", str(evil)),
                       ("diff.evil.command", str(evil)), ("merge.evil.driver", str(evil))):
        git(repo, "config", key, value)
    return repo, log


def _nothing_ran(log: Path) -> None:
    assert not log.exists(), f"the repository's programs ran: {log.read_text()}"


def test_node_pending_runs_no_fsmonitor_a_child_planted(loop_tree: LoopTree,
                                                         tmp_path: Path) -> None:
    """The reported attack: while its step waits at an approval gate, the child sets
    ``core.fsmonitor``; the operator's ``node pending`` (its diffstat runs git in the
    child's worktree) must not run it."""
    t = loop_tree
    log = tmp_path / "ran.log"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "fsmonitor $*" >> "{log}"\nexit 1\n')
    evil.chmod(0o755)
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]"}
    t.node("gated", steps, "--no-sync", "--max-iters", "1")
    seen: dict[str, object] = {}

    def at_the_gate() -> None:
        git(t.worktree("gated"), "config", "core.fsmonitor", str(evil))
        (t.worktree("gated") / "a.txt").write_text("changed\n")
        rows = json.loads(t.cli("node", "pending", "--json").output)
        seen["pending"] = [r["branch"] for r in rows]
        seen["ran"] = log.read_text() if log.exists() else ""
        git(t.worktree("gated"), "config", "--unset", "core.fsmonitor")
        t.cli("node", "approve", "gated")
    t.during("(A)", lambda: t.clock.after(30, at_the_gate))
    t.run("gated")
    assert seen == {"pending": ["main.gated"], "ran": ""}


def test_node_init_runs_no_hook_filter_or_fsmonitor(planted: tuple[Path, Path]) -> None:
    repo, log = planted
    out = run_cli_as(repo, "node", "init", "b")
    assert out.returncode == 0, out.stderr
    assert (repo / ".worktrees" / "main.b" / "README.md").read_text() == (
        repo / "README.md").read_text()
    _nothing_ran(log)


def test_node_merge_runs_no_hook_or_driver(planted: tuple[Path, Path]) -> None:
    repo, log = planted
    out = run_cli_as(repo, "node", "merge", "a")
    assert out.returncode == 0, out.stderr
    assert git(repo, "show", "main:work.txt") == "work"
    _nothing_ran(log)


def test_node_diff_runs_no_textconv_or_external_diff(planted: tuple[Path, Path]) -> None:
    repo, log = planted
    out = run_cli_as(repo, "node", "diff", "a")
    assert out.returncode == 0, out.stderr
    assert "+work" in out.stdout
    _nothing_ran(log)


def test_node_delete_runs_no_hook_or_fsmonitor(planted: tuple[Path, Path]) -> None:
    repo, log = planted
    (repo / ".worktrees" / "main.a" / "work.txt").write_text("changed\n")
    out = run_cli_as(repo, "node", "delete", "a", "--force")
    assert out.returncode == 0, out.stderr
    assert not (repo / ".worktrees" / "main.a").exists()
    _nothing_ran(log)


def test_fractal_commit_still_runs_the_nodes_hooks(planted: tuple[Path, Path]) -> None:
    """The node's own ``fractal commit`` runs the hooks on purpose (between runs, as the
    operator in the node's worktree)."""
    repo, log = planted
    child = repo / ".worktrees" / "main.a"
    (child / "more.txt").write_text("more\n")
    out = run_cli_as(child, "commit", "--init", "more work")
    assert out.returncode == 0, out.stderr
    assert "hook pre-commit" in log.read_text()
