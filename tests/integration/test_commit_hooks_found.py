"""``workspace.commit_hooks``: which hooks directory a commit uses and whether it holds a
hook a ``git commit`` would run, read from the repository's own config (never the
guard's ``core.hooksPath=/dev/null``: issue 29); a relayed commit starts its node's
sandbox for its ``git commit`` only when one would run."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.workspace.commit_hooks import HooksPlan, has_commit_hooks, plan_hooks
from tests.helpers import git, make_repo


def _hook(folder: Path, name: str, mode: int = 0o755) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nexit 0\n")
    (folder / name).chmod(mode)


@pytest.mark.parametrize(("layout", "runs"), [
    ("none", False),
    ("samples only", False),
    ("pre-commit", True),
    ("commit-msg", True),
    ("pre-push only", False),
    ("not executable", False),
    ("hooksPath dir", True),
])
def test_a_commit_hook_is_found_where_git_would_run_it(
        tmp_path: Path, layout: str, runs: bool) -> None:
    repo = make_repo(tmp_path / "repo")
    hooks = repo / ".git" / "hooks"
    if layout == "samples only":
        _hook(hooks, "pre-commit.sample")
    elif layout in ("pre-commit", "commit-msg"):
        _hook(hooks, layout)
    elif layout == "pre-push only":
        _hook(hooks, "pre-push")
    elif layout == "not executable":
        _hook(hooks, "pre-commit", 0o644)
    elif layout == "hooksPath dir":
        _hook(tmp_path / "mine", "pre-commit")
        git(repo, "config", "core.hooksPath", str(tmp_path / "mine"))
    assert has_commit_hooks(repo, ()) is runs
    assert plan_hooks(repo) == HooksPlan()


def test_the_guards_override_is_not_read_as_the_users_setting(tmp_path: Path) -> None:
    """No setting of the user's: no warning (the guard's ``/dev/null`` is fractal's)."""
    repo = make_repo(tmp_path / "repo")
    assert plan_hooks(repo) == HooksPlan()
    git(repo, "config", "core.hooksPath", str(tmp_path / "gone"))
    warning = plan_hooks(repo).warning
    assert warning is not None and str(tmp_path / "gone") in warning
