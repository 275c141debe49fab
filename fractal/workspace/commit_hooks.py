"""Git hooks in the commit pipeline: where they live, and the one pre-commit retry.

``core.hooksPath`` given as a relative path is resolved by git against the root of the
worktree that commits. In a node's linked worktree that directory exists only when it is
committed on the node's branch; otherwise git silently runs no hook at all. ``plan_hooks``
detects this: when the directory exists in the repository's main worktree instead, the
commit runs with ``-c core.hooksPath=<that absolute directory>`` (a notice says so); when it
exists nowhere, a warning reports that no hook will run. Nothing is skipped silently.

``plan_hooks`` reads the repository's own setting (fractal's guard overrides it with
``/dev/null`` for every other git it runs: that is not the user's). ``commit_index``
commits the index, here or, for a commit a node's sandboxed agent asked for, inside that
node's sandbox, so the user's hooks run there. When the commit fails and the worktree holds a
``.pre-commit-config.yaml`` (formatters rewrite files and exit 1), the hooks' edits are
re-staged and the commit retried once (docs/commit.md, "Hooks in node worktrees").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.workspace.commit_types import CommitFailed
from fractal.workspace.git import git_env, head_sha, repo_root, run_git
from fractal.workspace.gitguard import repository_programs

__all__ = ["COMMIT_HOOKS", "PRE_COMMIT_CONFIG", "CommitAttempt", "GitRunner", "HooksPlan",
           "commit_index", "has_commit_hooks", "plan_hooks"]

COMMIT_HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit",
                "reference-transaction", "post-index-change")
"""The hooks a ``git commit`` may run."""
PRE_COMMIT_CONFIG = ".pre-commit-config.yaml"
"""The pre-commit framework's config file; its presence arms the one retry."""
_OUTPUT_TAIL = 6000  # characters of hook output carried in an error


@dataclass(frozen=True)
class HooksPlan:
    """Extra git arguments for the commit (``-c core.hooksPath=...``) and what to report."""

    git_args: tuple[str, ...] = ()
    notice: str | None = None
    warning: str | None = None


@dataclass(frozen=True)
class CommitAttempt:
    """The result of ``commit_index``: the new sha (None: nothing left to commit) and notes."""

    sha: str | None
    notices: tuple[str, ...] = ()


def plan_hooks(worktree: Path) -> HooksPlan:
    """Decide how the commit in ``worktree`` finds its hooks (see the module docstring).

    Returns an empty plan when ``core.hooksPath`` is unset or resolves to an existing
    directory. Raises GitError only when git itself cannot run.
    """
    with repository_programs():  # the repository's setting, not the guard's /dev/null
        proc = run_git(["config", "--get", "core.hooksPath"], worktree, check=False)
    value = proc.stdout.strip()
    if proc.returncode != 0 or not value:
        return HooksPlan()
    configured = Path(os.path.expanduser(value))
    if configured.is_absolute():
        if configured.is_dir():
            return HooksPlan()
        return HooksPlan(warning=f"core.hooksPath {value} is not a directory: git runs no "
                                 "hooks for this commit; fix the setting or create it")
    here = worktree / configured
    if here.is_dir():
        return HooksPlan()
    main = repo_root(worktree) / configured
    if main.is_dir():
        return HooksPlan(git_args=("-c", f"core.hooksPath={main}"),
                         notice=f"core.hooksPath {value!r} is relative and missing from this "
                                f"worktree; running the hooks in {main}")
    return HooksPlan(warning=f"core.hooksPath {value!r} resolves to {here}, which does not "
                             "exist (nor in the main worktree): git runs no hooks for this "
                             "commit; commit the hooks directory or make the path absolute")


def has_commit_hooks(worktree: Path, git_args: Sequence[str]) -> bool:
    """Whether a ``git commit`` in ``worktree`` with ``git_args`` (``HooksPlan.git_args``)
    would run a hook: an executable file named as one of ``COMMIT_HOOKS`` in the hooks
    directory the repository's own config gives (git skips one that is not executable).
    Raises GitError only when git itself cannot run."""
    with repository_programs():  # the repository's setting, not the guard's /dev/null
        proc = run_git([*git_args, "rev-parse", "--git-path", "hooks"], worktree, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return False
    hooks = worktree / os.path.expanduser(proc.stdout.strip())
    return any(os.access(hooks / name, os.X_OK) and (hooks / name).is_file()
               for name in COMMIT_HOOKS)


def _output(proc_stdout: str, proc_stderr: str) -> str:
    text = "\n".join(part.strip() for part in (proc_stdout, proc_stderr) if part.strip())
    text = text or "(no output)"
    return text if len(text) <= _OUTPUT_TAIL else "...\n" + text[-_OUTPUT_TAIL:]


GitRunner = Callable[[Sequence[str], Mapping[str, str]], tuple[int, str]]
"""``git(argv, env) -> (exit code, merged output)``: runs ``argv`` (``git`` and its words)
with environment ``env`` in the worktree, somewhere else than this process (a node's
sandbox); the objects it writes are readable here once it returns."""


def _git_commit(args: Sequence[str], worktree: Path,
                git: GitRunner | None) -> tuple[int, str]:
    """``git <args>`` in ``worktree``: here (``run_git``), or through ``git`` with the
    repository's hooks on (the guard's overrides off: ``git`` confines them)."""
    if git is not None:
        with repository_programs():
            env = git_env()
        code, out = git(["git", *args], env)
        return code, _output(out, "")
    proc = run_git(list(args), worktree, check=False)
    return proc.returncode, _output(proc.stdout, proc.stderr)


def commit_index(worktree: Path, subject: str, *, no_verify: bool, git_args: Sequence[str],
                 restage: Callable[[], None], nothing_staged: Callable[[], bool],
                 git: GitRunner | None = None) -> CommitAttempt:
    """Commit the index of ``worktree`` with ``subject``; return the new sha.

    ``no_verify`` bypasses hooks; ``git_args`` go before ``commit`` (see ``plan_hooks``);
    ``git`` runs the commit (and so its hooks) elsewhere, default here.
    On failure with a PRE_COMMIT_CONFIG present, ``restage()`` re-stages the hooks' edits
    and the commit is retried once; if ``nothing_staged()`` is then true (the hooks undid
    every change) the attempt returns sha None. Raises CommitFailed carrying git's and the
    hooks' output (its tail) when the commit fails for good.
    """
    verify = ["--no-verify"] if no_verify else []
    args = [*git_args, "commit", *verify, "--quiet", "--cleanup=whitespace", "-m", subject]
    code, output = _git_commit(args, worktree, git)
    if code == 0:
        return CommitAttempt(head_sha(worktree))
    if not (worktree / PRE_COMMIT_CONFIG).is_file():
        raise CommitFailed(f"git commit failed (exit {code}); nothing was "
                           f"committed:\n{output}\nFix the cause and retry, or bypass hooks "
                           "with `fractal commit --force MESSAGE`")
    restage()
    note = "pre-commit hooks failed the first attempt; re-staged their edits and retried"
    if nothing_staged():
        return CommitAttempt(None, (note, "the hooks' edits left nothing to commit"))
    code, output = _git_commit(args, worktree, git)
    if code == 0:
        return CommitAttempt(head_sha(worktree), (note,))
    raise CommitFailed(f"git commit failed twice (exit {code}; pre-commit hooks, "
                       f"retried once after re-staging their edits); nothing was committed:\n"
                       f"{output}\nFix what the hooks report "
                       "and retry, or bypass hooks with `fractal commit --force MESSAGE`")
