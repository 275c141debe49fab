"""The seed commit of a fresh node worktree: ``<branch>: init (node seed)``.

``node init`` has just made the worktree (``git worktree add``), so several things the
general backstop commit (``workspace/backstop.py``) asks git about cannot be true
there: no merge, rebase, cherry-pick or revert is in progress, no index entry is
unmerged, no ``index.lock`` is left and no ``fractal commit`` runs in it, and nothing
is staged but what ``node init`` itself staged. This commit therefore runs three git
processes (stage; the staged paths with the diffstat; commit) where the backstop runs
five to seven, and makes the same commit: the same files (runtime artifacts left out by the same pathspecs), the
same message (subject, blank line, the capped diffstat) and the same refusal when a
file to be committed holds conflict-marker lines (UnresolvedConflict, raised before
the commit; the caller rolls the worktree back).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fractal.workspace.artifacts import exclude_pathspecs, is_runtime_artifact
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.conflict_guard import ConflictState, marker_files
from fractal.workspace.git import run_git

__all__ = ["SEED_STAT_LINES", "seed_commit", "staged_and_stat"]

SEED_STAT_LINES = 20
"""Most diffstat file lines folded into the message (as in a backstop commit)."""


def seed_commit(worktree: Path, subject: str) -> bool:
    """Stage everything in the fresh worktree ``worktree`` but runtime artifacts and
    commit it as ``subject`` followed by the diffstat, every hook bypassed and nothing
    signed; False (nothing committed) when nothing differs from the fork.

    Raises UnresolvedConflict when a staged file holds conflict markers (staged, not
    committed), GitError when git fails.
    """
    # no gitlink_excludes: a fresh worktree's gitlinks are empty directories (submodules
    # are never populated), so git has no nested repository to go into
    run_git(["add", "--all", "--", ".", *exclude_pathspecs()], worktree)
    staged, stat = staged_and_stat(worktree)
    artifacts = [p for p in staged if is_runtime_artifact(p)]
    if artifacts:  # tracked at the fork and changed since: never committed
        run_git(["reset", "--quiet", "--", *artifacts], worktree)
        staged, stat = staged_and_stat(worktree)
    if not staged:
        return False
    state = ConflictState(None, (), tuple(marker_files(worktree, staged)))
    if state.blocked:
        raise UnresolvedConflict(state.reason, state.paths, state.operation)
    message = subject.strip() + "\n\n" + _capped(stat)
    run_git(["-c", f"core.hooksPath={os.devnull}", "commit", "--no-verify", "--no-gpg-sign",
             "--quiet", "--cleanup=whitespace", "-m", message], worktree)
    return True


_NUMSTAT = re.compile(r"[\d-]+\t[\d-]+\t")


def staged_and_stat(worktree: Path) -> tuple[list[str], str]:
    """The staged paths (both sides of a rename) and the ``git diff --cached --stat`` text,
    from one git process: ``--numstat -z`` records (each starts with two counts and a
    tab; a rename's path field is empty and two NUL-ended paths follow) come first, then
    the stat, whose lines start with a space."""
    out = run_git(["diff", "--cached", "--stat=120", "--no-color", "--no-ext-diff",
                   "--numstat", "-z"], worktree).stdout
    paths: list[str] = []
    while _NUMSTAT.match(out):
        rest = out.split("\t", 2)[2]
        if rest.startswith("\0"):  # a rename or copy: old\0new\0
            before, after, out = rest[1:].split("\0", 2)
            paths += [before, after]
        else:
            path, out = rest.split("\0", 1)
            paths.append(path)
    return paths, out


def _capped(stat: str) -> str:
    """The stat's file lines (at most SEED_STAT_LINES, then ``... N more files``) and,
    when all of them fit, its summary line."""
    lines = [line.rstrip() for line in stat.splitlines() if line.strip()]
    files, summary = lines[:-1], lines[-1:]
    if len(files) <= SEED_STAT_LINES:
        return "\n".join(files + summary)
    return "\n".join([*files[:SEED_STAT_LINES],
                      f"... {len(files) - SEED_STAT_LINES} more files"])
