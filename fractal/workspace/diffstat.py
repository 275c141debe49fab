"""A node's changes as a diffstat: what it changed since it forked from its parent.

Used by the notice a gate posts when it starts waiting (``fork_diffstat``, worktree
included) and by the inbox and the dashboard (``shortstat``, the branch only), so the
parent sees what it is asked to approve without opening the worktree.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fractal.errors import GitError
from fractal.workspace.artifacts import exclude_pathspecs
from fractal.workspace.git import git_paths, gitlink_excludes, run_git

__all__ = ["STAT_LINES", "fork_diffstat", "shortstat"]

STAT_LINES = 20
"""Most file lines a diffstat keeps (the rest are counted on one line)."""


def fork_diffstat(worktree: Path, parent_ref: str) -> str:
    """``git diff --stat`` of ``worktree`` (commits, uncommitted edits and new files, as a
    commit of everything would hold them; runtime artifacts and ignored files aside)
    against its merge base with ``parent_ref``, node data directories (``.fractal/``)
    left out; the real index is left alone, at most STAT_LINES file lines plus the
    summary. Returns '' when nothing changed, or a one-line explanation when git cannot
    say (never raises for a git failure)."""
    try:
        base = run_git(["merge-base", "HEAD", parent_ref], worktree).stdout.strip()
        index = git_paths(worktree, ["index"])[0]
        with tempfile.TemporaryDirectory(prefix="fractal-stat-") as scratch:
            temp_index = Path(scratch) / "index"
            if index.is_file():
                shutil.copyfile(index, temp_index)
            env = {"GIT_INDEX_FILE": str(temp_index)}  # the real index is never touched
            # new files only as intent-to-add: nothing is written to the object store
            run_git(["add", "--all", "--intent-to-add", "--", ".", *exclude_pathspecs(),
                     *gitlink_excludes(worktree, env)],
                    worktree, env=env)
            out = run_git(["diff", "--stat=120", "--no-color", "--no-ext-diff",
                           "--ignore-submodules=dirty", base, "--",
                           ".", ":(exclude).fractal"], worktree, env=env).stdout
    except (GitError, OSError) as exc:
        return f"(no diffstat: {exc})"
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    files, summary = lines[:-1], lines[-1:]
    if len(files) > STAT_LINES:
        files = [*files[:STAT_LINES], f" ... {len(files) - STAT_LINES} more files"]
    return "\n".join(files + summary)


def shortstat(repo: Path, base: str, branch: str) -> str | None:
    """``git diff --shortstat base...branch`` (e.g. ``3 files changed, 40 insertions(+)``)
    with node data directories (``.fractal/``) left out, as a merge leaves them out;
    ``no changes`` when empty, None when git cannot tell (a missing branch). A read for
    display: a tip a live launch committed, not yet adopted, counts (``live``)."""
    proc = run_git(["diff", "--shortstat", f"{base}...{branch}", "--", ".",
                    ":(exclude).fractal"], repo, check=False, live=True)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or "no changes"
