"""Backstop commits: save whatever an iteration left uncommitted (docs/loop.md, "Backstop commits").

The loop calls this after each iteration (``auto``), at run end (``final``) and on failure
paths. It bypasses hooks and lint by design (``--no-verify``) and folds a capped diffstat
into the body so the save describes itself in git history alone (reference 4.12). Staging
uses the shared runtime-artifact excludes, so an artifact is never committed even when
``info/exclude`` is stale or empty.

A backstop never commits a conflict: while the worktree has a merge, rebase, cherry-pick or
revert in progress, unmerged index entries, or a file to be saved holding conflict-marker
lines, it raises ``UnresolvedConflict`` (reason ``unresolved merge conflict in <paths>``)
and leaves the worktree, index and git dir exactly as they were.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from fractal.errors import GitError
from fractal.workspace.artifacts import exclude_pathspecs, is_runtime_artifact
from fractal.workspace.commit_lock import clear_index_lock, commit_turn
from fractal.workspace.commit_scope import covered
from fractal.workspace.commit_stage import add_paths
from fractal.workspace.commit_types import NestedRepository, UnresolvedConflict
from fractal.workspace.conflict_guard import check_no_conflict
from fractal.workspace.git import (
    branch_exists,
    current_branch,
    gitlink_excludes,
    head_after_commit,
    run_git,
    worktree_status,
)
from fractal.workspace.nested import check_no_nested
from fractal.workspace.nodelinks import drop_staged_links
from fractal.workspace.seedcommit import staged_and_stat
from fractal.workspace.status_ahead import PendingStatus, start_worktree_status

__all__ = ["STAT_LINES", "backstop_commit"]

log = logging.getLogger(__name__)

STAT_LINES = 20
"""Most diffstat file lines folded into a backstop body (reference 4.12)."""
# Every hook is bypassed, not only the ones --no-verify skips (prepare-commit-msg and
# post-commit too): a backstop must never hang on, or be refused by, a hook.
_NO_HOOKS = ["-c", f"core.hooksPath={os.devnull}"]


def _unaddable(worktree: Path, paths: Sequence[str]) -> list[str]:
    """Untracked paths git cannot add (FIFOs, sockets, devices): left out, not fatal."""
    out = run_git(["ls-files", "--others", "--exclude-standard", "-z", "--", *paths],
                  worktree).stdout
    odd: list[str] = []
    for rel in filter(None, out.split("\0")):
        try:
            mode = os.lstat(worktree / rel).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):
            odd.append(rel)
    return odd


def _stage(worktree: Path, paths: Sequence[str], candidates: list[str]) -> tuple[list[str], str]:
    """Stage the candidates (special files and runtime artifacts left out); (the staged
    paths, the ``git diff --cached --stat`` of them), read from the same ``git diff``
    (``seedcommit.staged_and_stat``)."""
    odd = _unaddable(worktree, paths)
    if odd:
        log.warning("not committing %d special file(s) git cannot add: %s", len(odd),
                    ", ".join(odd[:5]))
    if _whole(paths):
        skip = [f":(exclude,literal){rel}" for rel in odd]
        run_git(["add", "--all", "--", *paths, *exclude_pathspecs(), *skip,
                 *gitlink_excludes(worktree)], worktree)
    else:  # named one by one: see commit_stage.add_paths
        add_paths(worktree, [p for p in candidates if p not in odd])
    # Never commit an artifact, even one somebody staged by hand earlier.
    staged, stat = staged_and_stat(worktree)
    artifacts = [p for p in staged if is_runtime_artifact(p)]
    if artifacts:
        run_git(["reset", "--quiet", "--", *artifacts], worktree)
        staged, stat = staged_and_stat(worktree)
    # Never commit a link under .fractal/: a child forked here would follow it.
    links = drop_staged_links(worktree, staged)
    if links:
        log.warning("not committing %d link(s) under .fractal/ (removed from the branch): %s",
                    len(links), ", ".join(links[:5]))
        staged, stat = staged_and_stat(worktree)
    return staged, stat


def _whole(paths: Sequence[str]) -> bool:
    return any(p.strip("/") in ("", ".") for p in paths)


def _trusted_early(answer: tuple[list[str], bool] | None, paths: Sequence[str]) -> bool:
    """Whether a status started ahead may stand for one asked now. It cannot see a file
    changed after it started, so only where that cannot matter: it lists changes over an
    index matching HEAD and the whole worktree is staged (``add --all`` takes every late
    change, and the late paths are then checked and, refused, undone exactly)."""
    return answer is not None and _whole(paths) and answer[1] and bool(answer[0])


def _candidates(worktree: Path, paths: Sequence[str], early: PendingStatus | None,
                own: PendingStatus | None) -> tuple[list[str], bool]:
    """The changed paths (artifacts aside) under ``paths``, plus what is staged already;
    and whether the index matches HEAD (nothing staged, nothing unmerged: git was not
    asked for either). ``early``: the status the caller started ahead, used when it may
    stand (see ``backstop_commit``); ``own``: the status started at the backstop's entry,
    used otherwise (then git is asked only when neither can be)."""
    roots = [p.strip("/") for p in paths]
    answer = early.result() if early is not None else None
    if _trusted_early(answer, paths):
        if own is not None:
            own.cancel()  # the early answer won the race
    else:
        answer = own.result() if own is not None else None
    changed, index_clean = answer if answer is not None else worktree_status(worktree)
    if not _whole(paths):
        changed = [p for p in changed if covered(p, roots)]
    if index_clean:
        return changed, True
    staged = run_git(["diff", "--cached", "--name-only", "-z", "--no-renames"], worktree).stdout
    return list(dict.fromkeys([*changed, *filter(None, staged.split("\0"))])), False


def _capped(out: str) -> str:
    """The ``git diff --cached --stat`` text ``out`` with at most STAT_LINES file lines."""
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    files, summary = lines[:-1], lines[-1:]
    if len(files) <= STAT_LINES:
        return "\n".join(files + summary)
    return "\n".join([*files[:STAT_LINES], f"... {len(files) - STAT_LINES} more files"])


def _commit(worktree: Path, subject: str, body: str, paths: Sequence[str],
            early: PendingStatus | None = None, own: PendingStatus | None = None) -> str | None:
    candidates, index_clean = _candidates(worktree, paths, early, own)
    check_no_conflict(worktree, candidates, unmerged_known=() if index_clean else None)
    check_no_nested(worktree, candidates)  # never a gitlink holding none of its files
    if not candidates:  # nothing changed, nothing staged: there is nothing to stage either
        return None
    staged, stat = _stage(worktree, paths, candidates)
    if not staged:  # the index matches HEAD: there is nothing to commit
        return None
    late = [p for p in staged if p not in set(candidates)]
    if index_clean and late:  # changed after the status answered (an early one, or any
        # status: it runs before the staging) and refused as any other file; the index
        # matched HEAD, so the undo is exact
        try:
            check_no_conflict(worktree, late, unmerged_known=())
            check_no_nested(worktree, late)
        except (UnresolvedConflict, NestedRepository):
            run_git(["reset", "--quiet"], worktree)  # the index matched HEAD before
            raise
    message = subject.strip()
    if body.strip():
        message += "\n\n" + body.strip()
    message += "\n\n" + _capped(stat)
    run_git([*_NO_HOOKS, "commit", "--no-verify", "--no-gpg-sign", "--quiet",
             "--cleanup=whitespace", "-m", message], worktree)
    return head_after_commit(worktree)


def _check_branch(worktree: Path, branch: str) -> None:
    """Raise GitError (nothing committed) unless ``worktree`` is on ``branch`` and it exists."""
    head = current_branch(worktree)
    if head != branch:
        raise GitError(f"{worktree} is on {head or 'a detached HEAD'}, not {branch}; "
                       "nothing was committed (check out the node branch to keep the work)")
    if not branch_exists(worktree, branch):  # a commit would start a new root
        raise GitError(f"the branch {branch} is gone; nothing was committed (the work is "
                       "still in the worktree)")


def backstop_commit(worktree: Path, *, subject: str, body: str = "",
                    branch: str | None = None, paths: Sequence[str] = (".",),
                    pending: PendingStatus | None = None) -> str | None:
    """Commit what is left in ``worktree`` (under ``paths``) except runtime artifacts;
    return the new sha, or None when nothing is left to commit.

    ``subject`` is composed by the caller (``<branch>: iteration 2.3 (auto)``); ``body``
    an optional paragraph (the failure, the steps that never ran). The message ends with
    the ``git diff --cached --stat`` capped at STAT_LINES file lines. Every hook is
    bypassed and nothing is signed. When ``branch`` is given and HEAD is elsewhere (an
    agent switched branches) or the branch no longer exists (deleted behind fractal's
    back: a commit would start an unrelated history), nothing is committed and GitError
    says so (checked once the commit turn is held: another commit's wait is no gap). An
    ``index.lock`` with no live git process in the worktree is removed and the attempt
    retried once; while a git process holds it, GitError/IndexLocked is raised. A
    ``fractal commit`` running in the worktree is waited for (``commit_turn``). Raises
    UnresolvedConflict, committing and changing nothing, while the worktree holds a
    conflict (see the module docstring).

    ``pending`` is a status of ``worktree`` the caller started earlier
    (``status_ahead.start_worktree_status``), after the last change it knows could have
    happened there (a loop: once the iteration's last agent is gone); it is used under
    the same rule as the status started here, and always collected. As a file can change
    after it started, its answer is used only when it lists changes and the index
    matched HEAD and ``paths`` is the whole worktree: ``add --all`` then stages every
    change there is at commit time, and a path it stages that the answer did not list is
    checked for conflict markers too (a refusal resets the index to ``HEAD``, as it was).
    Otherwise the status started at this call's entry answers (it runs beside the early
    one until that one's answer is known), so the commit holds what ``git status`` shows
    then; when the commit turn was held by another commit meanwhile, the files may have
    changed while it waited, so that status is ended and git asked again in the turn.
    Whichever status answered, a path ``add --all`` stages that it did not list (written
    after it ran) is checked for conflict markers like the rest when the index matched
    HEAD (a refusal resets the index to ``HEAD``).
    """
    # A status of its own starts first: its git process runs while the turn is taken and
    # the branch checked (in the turn, so HEAD cannot move after the check), racing the
    # early one when there is one (whose answer, when it may stand, wins and the other is
    # ended). A status's answer is used only when no commit came in between (the index,
    # HEAD and the branch ref are as they were when it started), else git is asked again.
    early = pending
    own = None
    if early is None or not (early.answered() and _trusted_early(early.result(), paths)):
        own = start_worktree_status(worktree)
    try:
        with commit_turn(worktree) as waited:
            if branch is not None:  # in the turn: HEAD may move while another holds it
                _check_branch(worktree, branch)
            if waited and own is not None:
                # Its answer predates a commit turn held by another: the files may have
                # changed while it was held (a lint.sh rewrite, a person), so git is asked
                # now (an early answer's own rule, late paths checked, still holds).
                own.cancel()
                own = None
            try:
                return _commit(worktree, subject, body, paths, early, own)
            except GitError:
                notice = clear_index_lock(worktree)
                if notice is None:
                    raise
                log.warning("%s; retrying the backstop commit (stale git lock)", notice)
            return _commit(worktree, subject, body, paths)
    finally:
        for status in (early, own):
            if status is not None:
                status.discard()
