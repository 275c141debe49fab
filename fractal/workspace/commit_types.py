"""Values and errors of the ``fractal commit`` pipeline (docs/commit.md).

The pipeline (``workspace.commit``) takes one ``CommitRequest`` and returns one
``CommitOutcome``; every refusal is a ``CommitError`` (a ``FractalError``: the CLI prints
``Error: <message>`` and exits 1, never a traceback).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fractal.domain.merge.conflicts import Operation, operation_reason
from fractal.errors import FractalError

__all__ = [
    "CommitError",
    "CommitFailed",
    "CommitMode",
    "CommitOutcome",
    "CommitRequest",
    "IndexLocked",
    "LintFailed",
    "NestedRepository",
    "ScopeViolation",
    "ScriptRunner",
    "UncommittedChanges",
    "UnresolvedConflict",
    "listing",
]

LIST_CAP = 20
"""Most paths a message lists before ``... and N more``."""


class CommitMode(enum.Enum):
    """How ``fractal commit`` runs; the four non-default modes are mutually exclusive."""

    ITERATION = "iteration"
    """The default: subject ``<branch>: iteration <run>.<iter> (<message>)``."""
    INIT = "init"
    """The baseline commit: subject ``<branch>: init (<message>)``; all checks apply."""
    CHECK = "check"
    """Commit nothing; refuse when uncommitted changes exist."""
    IGNORE_SCOPE = "ignore-scope"
    """Skip the scope check and stage the whole worktree; lint and hooks still run."""
    FORCE = "force"
    """Skip scope, lint and git hooks (``--no-verify`` on commit and push)."""


ScriptRunner = Callable[[Sequence[str], Path, Mapping[str, str], float | None],
                        tuple[int, str]]
"""``runner(argv, cwd, env, timeout_s) -> (exit code, merged output)``: how the pipeline runs
``scripts/lint.sh`` (``env`` is the full environment; 124 means timed out)."""


@dataclass(frozen=True)
class CommitRequest:
    """Everything the pipeline needs, resolved by the caller.

    ``worktree`` is the worktree root and ``node_dir`` the node's data dir inside it (both
    absolute). ``subject`` is the finished subject line. ``scope`` holds canonical scope roots
    relative to the worktree (``()`` = unscoped: every path is allowed). ``local`` True never
    pushes. ``script_env`` is the environment ``scripts/lint.sh`` runs with. ``author``, when
    set, is the per-worktree ``user.name`` written if the worktree has none yet, so
    commits in a node's worktree carry the branch as author. ``programs`` False keeps the
    repository's hooks, fsmonitor and drivers off for every git the pipeline runs in this
    process (a commit a sandboxed agent asked for through its relay: they would run
    outside its sandbox); its ``git commit`` and push, with their hooks, then run through
    the pipeline's runner, which confines them.
    """

    worktree: Path
    branch: str
    node_dir: Path
    subject: str
    mode: CommitMode = CommitMode.ITERATION
    scope: tuple[str, ...] = ()
    local: bool = False
    script_env: Mapping[str, str] = field(default_factory=dict)
    author: str | None = None
    programs: bool = True


@dataclass(frozen=True)
class CommitOutcome:
    """What the pipeline did.

    ``sha`` is the new commit (None: nothing was committed). ``files`` are the paths in the
    commit. ``pushed`` is True only after a successful ``git push``. ``notices`` are
    informational lines, ``warnings`` things the caller should look at; neither blocks.
    """

    sha: str | None
    subject: str
    files: tuple[str, ...] = ()
    pushed: bool = False
    notices: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


class CommitError(FractalError):
    """``fractal commit`` refused or failed; nothing was committed."""


class ScopeViolation(CommitError):
    """Changed paths lie outside the node's scope. ``paths`` lists them; nothing was staged."""

    def __init__(self, message: str, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)
        super().__init__(message)


class LintFailed(CommitError):
    """``scripts/lint.sh`` exited non-zero. ``output`` is its (tail of) output."""

    def __init__(self, message: str, output: str) -> None:
        self.output = output
        super().__init__(message)


class CommitFailed(CommitError):
    """``git commit`` failed (usually a hook), after the one pre-commit retry if any."""


class IndexLocked(CommitError):
    """The worktree's ``index.lock`` is held by a live git process."""


class UncommittedChanges(CommitError):
    """``--check`` found uncommitted changes. ``paths`` lists them."""

    def __init__(self, message: str, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)
        super().__init__(message)


class UnresolvedConflict(CommitError):
    """The worktree holds a conflict (a half-done merge, rebase, cherry-pick or revert,
    unmerged index entries, or files with conflict markers); nothing was committed.

    ``reason`` is ``unresolved merge conflict in <paths>`` (what an iteration fails with),
    ``paths`` the conflicting files, ``operation`` the half-done git operation or None.
    The message adds the next step.
    """

    def __init__(self, reason: str, paths: Sequence[str],
                 operation: Operation | None = None) -> None:
        self.reason = reason
        self.paths = tuple(paths)
        self.operation = operation
        if paths:
            step = ("edit each file to keep the right lines and drop every `<<<<<<<`, "
                    "`=======` and `>>>>>>>` line, `git add` it")
            if operation is not None:
                step += f", then conclude the {operation.value} with `git commit --no-edit`"
                if operation is Operation.REBASE:
                    step = step.replace("`git commit --no-edit`", "`git rebase --continue`")
                step += f" (or abandon it with `{operation.abort_hint}`)"
            else:
                step += " and commit again"
            message = f"{reason}; nothing was committed: {step}"
        elif operation is not None:
            message = f"{reason}; nothing was committed: {operation_reason(operation)}"
        else:
            message = f"{reason}; nothing was committed"
        super().__init__(message)


class NestedRepository(CommitError):
    """Changed paths are git repositories of their own (a nested ``.git``, as a scaffolder
    makes): git would commit each as a bare pointer (a gitlink) holding none of its files,
    which a merge or retire then deletes. ``paths`` lists them; nothing was committed and
    their files stay on disk."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)
        first = self.paths[0]
        super().__init__(
            f"nested git repository in {listing(self.paths)}: git would commit it as a bare "
            "pointer (gitlink) without its files, and a merge or retire would then delete "
            "them; nothing was committed. Either make it a submodule (`git submodule add "
            f"<url> {first}`), or keep its files in this branch: remove its `.git` "
            f"(`rm -rf {first}/.git`), `git rm --cached {first}` if it was staged, and "
            "commit again")


def listing(paths: Sequence[str], cap: int = LIST_CAP) -> str:
    """``a, b, c`` for at most ``cap`` paths, then ``... and N more``."""
    shown = ", ".join(paths[:cap])
    return shown if len(paths) <= cap else f"{shown} ... and {len(paths) - cap} more"
