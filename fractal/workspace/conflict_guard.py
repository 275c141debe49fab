"""Never commit a conflict: the check ``fractal commit`` and every backstop commit run first.

A worktree is refused when git has a merge, rebase, cherry-pick or revert in progress
there (``MERGE_HEAD``, ``rebase-merge/``, ``rebase-apply/``, ``CHERRY_PICK_HEAD``,
``REVERT_HEAD`` in its git dir), when its index holds unmerged entries, or when a file the
commit would stage gains conflict-marker lines: a hunk with a fence line its ``HEAD``
version lacks (``domain.merge.conflicts.adds_conflict_markers``; a hunk committed earlier, a git
tutorial, does not block the file's later edits). ``fractal commit --force`` commits
marker lines the agent wrote on purpose (``own_markers``), except in a file that is in a
conflict: unmerged, or named by the hand-back the node is resolving (``conflicted``).
The check only reads: the worktree, its index and its git dir are left exactly as they were.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.merge.conflicts import (
    Operation,
    adds_conflict_markers,
    conflict_reason,
    has_conflict_markers,
)
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.git import changed_paths, git_paths, run_git, show_file

__all__ = ["ConflictState", "check_no_conflict", "conflict_state", "marker_files",
           "operation_in_progress", "unmerged_paths"]

_MARKER_READ_CAP = 16 * 1024 * 1024  # bytes: larger files are not scanned for markers
# Git-dir entries that say an operation is half done, in the order they are looked for.
_STATE_FILES: tuple[tuple[str, Operation], ...] = (
    ("rebase-merge", Operation.REBASE),
    ("rebase-apply", Operation.REBASE),
    ("MERGE_HEAD", Operation.MERGE),
    ("CHERRY_PICK_HEAD", Operation.CHERRY_PICK),
    ("REVERT_HEAD", Operation.REVERT),
)


@dataclass(frozen=True)
class ConflictState:
    """What holds a worktree back from committing: the half-done ``operation`` (or None),
    the ``unmerged`` index paths and the changed files holding conflict ``markers``."""

    operation: Operation | None
    unmerged: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        return self.operation is not None or bool(self.unmerged) or bool(self.markers)

    @property
    def paths(self) -> tuple[str, ...]:
        """The conflicting files, unmerged ones first, each once."""
        return tuple(dict.fromkeys((*self.unmerged, *self.markers)))

    @property
    def reason(self) -> str:
        """``unresolved merge conflict in <paths>`` (or the operation left in progress)."""
        return conflict_reason(self.paths, self.operation)


def operation_in_progress(worktree: Path) -> Operation | None:
    """The merge, rebase, cherry-pick or revert half done in ``worktree``, or None."""
    found = git_paths(worktree, [name for name, _ in _STATE_FILES])
    for (_name, operation), path in zip(_STATE_FILES, found, strict=True):
        if path.exists():
            return operation
    return None


def unmerged_paths(worktree: Path) -> list[str]:
    """Repo-relative paths with unmerged (conflict stage) index entries, each once."""
    out = run_git(["diff", "--name-only", "-z", "--diff-filter=U", "--ignore-submodules=dirty"],
                  worktree).stdout
    return list(dict.fromkeys(p for p in out.split("\0") if p))


def marker_files(worktree: Path, paths: Iterable[str]) -> list[str]:
    """The ``paths`` whose worktree copy is a regular text file holding conflict markers."""
    found: list[str] = []
    for rel in paths:
        target = worktree / rel
        try:
            if target.is_symlink() or not target.is_file():
                continue
            if target.stat().st_size > _MARKER_READ_CAP:
                continue
            data = target.read_bytes()
        except OSError:
            continue
        if has_conflict_markers(data):
            found.append(rel)
    return found


def _staged(worktree: Path) -> list[str]:
    out = run_git(["diff", "--cached", "--name-only", "-z", "--no-renames"], worktree).stdout
    return [p for p in out.split("\0") if p]


def conflict_state(worktree: Path, paths: Iterable[str] | None = None, *,
                   unmerged_known: Sequence[str] | None = None, own_markers: bool = False,
                   conflicted: Sequence[str] = ()) -> ConflictState:
    """Inspect ``worktree`` without changing it.

    ``paths`` are the files a commit would stage (None: every changed path, plus what is
    staged already); only they are scanned for markers, and a file counts only when it
    gains a hunk against ``HEAD``. ``unmerged_known`` is the unmerged paths when the
    caller has just read them from ``git status`` (None: ask git). With ``own_markers``
    only the files of ``conflicted`` (a hand-back's) count. Raises GitError.
    """
    operation = operation_in_progress(worktree)
    unmerged = (unmerged_paths(worktree) if unmerged_known is None
                else list(dict.fromkeys(unmerged_known)))
    if paths is None:
        candidates = list(dict.fromkeys((*changed_paths(worktree), *_staged(worktree))))
    else:
        candidates = list(dict.fromkeys(paths))
    markers = [p for p in marker_files(worktree, candidates)
               if p not in unmerged and _adds_markers(worktree, p)]
    if own_markers:  # written on purpose: only a file in a conflict is still refused
        markers = [p for p in markers if p in conflicted]
    return ConflictState(operation, tuple(unmerged), tuple(markers))


def _adds_markers(worktree: Path, rel: str) -> bool:
    """Whether ``rel`` (holding markers now) gains a hunk its ``HEAD`` version lacks; one
    git process, only for a file that holds markers at all."""
    try:
        new = (worktree / rel).read_bytes()
    except OSError:
        return False
    old = show_file(worktree, "HEAD", rel)
    return adds_conflict_markers(None if old is None else old.encode("utf-8"), new)


def check_no_conflict(worktree: Path, paths: Iterable[str] | None = None, *,
                      unmerged_known: Sequence[str] | None = None,
                      own_markers: bool = False, conflicted: Sequence[str] = ()) -> None:
    """Raise UnresolvedConflict (nothing committed, nothing changed) when ``worktree`` is
    held back by a conflict (see ``conflict_state``); return None otherwise."""
    state = conflict_state(worktree, paths, unmerged_known=unmerged_known,
                           own_markers=own_markers, conflicted=conflicted)
    if state.blocked:
        raise UnresolvedConflict(state.reason, state.paths, state.operation)
