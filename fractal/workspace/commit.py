"""The ``fractal commit`` pipeline (docs/commit.md: its steps in order).

In order: clear a stale ``index.lock`` (or refuse while a git process holds it), refuse a
conflict (a merge, rebase, cherry-pick or revert in progress, unmerged entries, or a file to
be staged holding conflict markers: ``conflict_guard``), check scope, run ``scripts/lint.sh``, stage the allowed roots without runtime artifacts, warn about
ignored and large files, commit (one retry after pre-commit hooks rewrote files), report the
new sha to the caller (who records the ``commit`` event), then push ``origin <branch>``
unless the node is ``local``. A worktree with nothing to commit is a tolerated no-op.

This module never touches the database and never prints: the caller resolves the node,
composes the subject, records the event and renders the outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fractal.workspace.commit_hooks import HooksPlan, commit_index, has_commit_hooks, plan_hooks
from fractal.workspace.commit_lock import clear_index_lock, commit_turn
from fractal.workspace.commit_scope import allowed_roots, check_scope, covered
from fractal.workspace.commit_stage import (
    ignored_warning,
    large_files_warning,
    links_warning,
    nothing_staged,
    stage,
    staged_paths,
)
from fractal.workspace.commit_types import (
    CommitMode,
    CommitOutcome,
    CommitRequest,
    LintFailed,
    ScriptRunner,
    UncommittedChanges,
    listing,
)
from fractal.workspace.conflict_guard import check_no_conflict
from fractal.workspace.git import changed_paths, commit_files, git_env, has_remote, run_git
from fractal.workspace.gitguard import repository_programs
from fractal.workspace.handback import read_note
from fractal.workspace.nested import check_no_nested
from fractal.workspace.wiki import guard_generated, node_wikis, snapshot_generated
from fractal.workspace.worktrees import set_identity

__all__ = ["LINT_TIMEOUT", "PUSH_TIMEOUT", "check_clean", "ensure_identity", "push_branch",
           "run_lint", "run_pipeline"]

LINT_TIMEOUT = 600.0
"""Seconds ``scripts/lint.sh`` may run before it is stopped and the commit fails."""
PUSH_TIMEOUT = 300.0
"""Seconds ``git push`` may run (hooks and network included) before it is stopped."""
_LINT_TAIL = 6000  # characters of lint output carried in the error


class _Notes:
    """Notices and warnings gathered along the way (the pipeline never prints)."""

    def __init__(self) -> None:
        self.notices: list[str] = []
        self.warnings: list[str] = []

    def notice(self, text: str | None) -> None:
        if text:
            self.notices.append(text)

    def warn(self, text: str | None) -> None:
        if text:
            self.warnings.append(text)

    def outcome(self, subject: str, sha: str | None = None, files: tuple[str, ...] = (),
                pushed: bool = False) -> CommitOutcome:
        return CommitOutcome(sha=sha, subject=subject, files=files, pushed=pushed,
                             notices=tuple(self.notices), warnings=tuple(self.warnings))


def check_clean(worktree: Path) -> None:
    """``--check``: raise UncommittedChanges listing every uncommitted path, if any.

    Runtime artifacts and ignored files do not count (``git.changed_paths``).
    """
    paths = changed_paths(worktree)
    if paths:
        raise UncommittedChanges(
            f"{len(paths)} uncommitted change(s) in {worktree}: {listing(paths)}; commit them "
            "with `fractal commit MESSAGE`", paths)


def run_lint(request: CommitRequest, runner: ScriptRunner) -> bool:
    """Run ``<node_dir>/scripts/lint.sh`` with bash from the worktree root.

    Returns False when the script does not exist (lint skipped), True when it passed.
    Raises LintFailed with the tail of its output when it exits non-zero or runs longer
    than LINT_TIMEOUT seconds (exit 124).
    """
    script = request.node_dir / "scripts" / "lint.sh"
    if not script.is_file():
        return False
    code, output = runner(["bash", str(script)], request.worktree, request.script_env,
                          LINT_TIMEOUT)
    if code == 0:
        return True
    tail = output.strip()
    if len(tail) > _LINT_TAIL:
        tail = "...\n" + tail[-_LINT_TAIL:]
    why = f"timed out after {LINT_TIMEOUT:g}s" if code == 124 else f"failed (exit {code})"
    raise LintFailed(f"{script} {why}; nothing was committed:\n{tail or '(no output)'}\n"
                     "Fix what it reports and retry, or skip lint with `fractal commit --force "
                     "MESSAGE`", tail)


def _programs(allowed: bool) -> contextlib.AbstractContextManager[None]:
    """``repository_programs()`` when ``allowed``, else nothing (the guard stays on)."""
    return repository_programs() if allowed else contextlib.nullcontext()


def push_branch(worktree: Path, branch: str, *, no_verify: bool, runner: ScriptRunner,
                timeout: float = PUSH_TIMEOUT,
                programs: bool = True) -> tuple[bool, str | None, str | None]:
    """Push ``branch`` to ``origin``; return ``(pushed, notice, warning)``.

    A missing ``origin`` remote is a notice; a failed push is a warning (the commit stands).
    The push runs through ``runner`` as its own process group with no terminal, so a
    pre-push hook, a credential helper or a stalled network is stopped after ``timeout``
    seconds (a warning: ``timed out``) instead of holding the agent's step.
    """
    if not has_remote(worktree, "origin"):
        return False, "no origin remote: push skipped", None
    verify = ["--no-verify"] if no_verify else []
    with _programs(programs):  # fractal commit's push: its pre-push hook runs
        env = git_env()
    code, output = runner(["git", "-C", str(worktree), "push", "--quiet", *verify, "origin",
                           branch], worktree, env, timeout)
    if code == 0:
        return True, f"pushed {branch} to origin", None
    detail = (output.strip() or "(no output)")[-1000:]
    why = f"timed out after {timeout:g}s" if code == 124 else f"failed (exit {code})"
    return False, None, (f"push to origin {why}: {detail}; the commit stands; push later "
                         f"with `git push origin {branch}`")


def ensure_identity(worktree: Path, name: str) -> str | None:
    """Give ``worktree`` the per-worktree ``user.name`` ``name`` unless it has one already.

    Returns a notice when it wrote the identity (``worktrees.set_identity``), else None.
    """
    proc = run_git(["config", "--worktree", "--get", "user.name"], worktree, check=False)
    if proc.returncode == 0 and proc.stdout.strip():
        return None
    set_identity(worktree, name)
    return f"commits in {worktree} are now authored as {name} (per-worktree identity)"


def run_pipeline(request: CommitRequest, *, runner: ScriptRunner,
                 on_commit: Callable[[str], None] | None = None,
                 lint_runner: ScriptRunner | None = None) -> CommitOutcome:
    """Run the whole pipeline for ``request``; return what it did.

    ``runner`` runs the push, and ``scripts/lint.sh`` unless ``lint_runner`` is given
    (see ScriptRunner). ``on_commit(sha)`` is called
    once the commit has landed and before the push (the caller records its ``commit`` event
    there). Commits in one worktree take turns (``commit_turn``; ``--check`` only reads and
    skips it). Raises UncommittedChanges (``--check``), IndexLocked, ScopeViolation,
    LintFailed, CommitFailed, UnresolvedConflict, GitError; on any of them nothing has been
    committed.
    """
    worktree, mode = request.worktree, request.mode
    notes = _Notes()
    if mode is CommitMode.CHECK:
        check_clean(worktree)
        notes.notice(f"no uncommitted changes in {worktree}")
        return notes.outcome(request.subject)
    with commit_turn(worktree), _programs(request.programs):  # the one git run with hooks
        return _commit(request, notes, runner, on_commit, lint_runner or runner)


def _commit(request: CommitRequest, notes: _Notes, runner: ScriptRunner,
            on_commit: Callable[[str], None] | None,
            lint_runner: ScriptRunner) -> CommitOutcome:
    """The writing part of ``run_pipeline``, run while holding the worktree's commit turn."""
    worktree, mode = request.worktree, request.mode
    notes.notice(clear_index_lock(worktree))
    whole = mode in (CommitMode.IGNORE_SCOPE, CommitMode.FORCE)
    node_rel = request.node_dir.resolve().relative_to(worktree.resolve()).as_posix()
    roots = None if whole else allowed_roots(request.scope, node_rel)
    changed = changed_paths(worktree)
    staged_now = _staged_now(worktree)
    note = read_note(request.node_dir)  # the files a hand-back left it to resolve
    check_no_conflict(worktree, [p for p in changed if roots is None or covered(p, roots)]
                      + staged_now, own_markers=mode is CommitMode.FORCE,
                      conflicted=note.files if note is not None else ())
    check_no_nested(worktree, [*changed, *staged_now])
    check_scope(worktree, request.branch, roots)
    if not changed_paths(worktree) and nothing_staged(worktree):
        notes.notice("nothing to commit (the work may be committed already)")
        return notes.outcome(request.subject)
    force = mode is CommitMode.FORCE
    if not force:
        run_lint(request, lint_runner)
    notes.warn(links_warning(stage(worktree, roots)))
    staged = staged_paths(worktree)
    if not staged:
        notes.notice("nothing staged: every change is a runtime artifact or ignored")
        return notes.outcome(request.subject)
    notes.warn(ignored_warning(worktree, roots))
    notes.warn(large_files_warning(worktree, staged))
    if request.author:
        notes.notice(ensure_identity(worktree, request.author))
    hooks = HooksPlan() if force else plan_hooks(worktree)
    notes.notice(hooks.notice)
    notes.warn(hooks.warning)
    generated = snapshot_generated(node_wikis(worktree, request.node_dir))

    def restage() -> None:  # a hook's rewrite of a generated wiki index fails the commit
        guard_generated(generated, worktree)
        stage(worktree, roots)

    def confined_git(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, str]:
        return runner(argv, worktree, env, None)  # the commit and its hooks in the sandbox

    # a confined request's commit runs through ``runner`` (its sandbox) only when a hook
    # would run: else here, guarded, as fast as before (one sandbox start saved)
    confine = not (request.programs or force) and has_commit_hooks(worktree, hooks.git_args)
    attempt = commit_index(worktree, request.subject, no_verify=force, git_args=hooks.git_args,
                           restage=restage, nothing_staged=lambda: nothing_staged(worktree),
                           git=confined_git if confine else None)
    for text in attempt.notices:
        notes.notice(text)
    if attempt.sha is None:
        return notes.outcome(request.subject)
    if on_commit is not None:
        on_commit(attempt.sha)
    pushed = False
    if request.local:
        notes.notice("local node: push skipped")
    else:
        # the push runs through ``runner`` (a confined request's: inside the node's
        # sandbox), so its pre-push hook runs wherever the commit's hooks did
        pushed, notice, warning = push_branch(worktree, request.branch, no_verify=force,
                                              runner=runner)
        notes.notice(notice)
        notes.warn(warning)
    return notes.outcome(request.subject, attempt.sha, commit_files(worktree, attempt.sha),
                         pushed)


def _staged_now(worktree: Path) -> list[str]:
    out = run_git(["diff", "--cached", "--name-only", "-z", "--no-renames"], worktree).stdout
    return [p for p in out.split("\0") if p]
