"""Thin git wrappers: the only place (with the rest of ``workspace/``) that runs git.

Where the git dir's files answer as git would (``gitfiles``: HEAD, loose refs, objects),
they are read instead of running git; the rest asks git.

Every call is ``git -C <cwd> ...`` with the repository's own programs switched off
(``gitguard``: hooks, fsmonitor, filters and drivers), ``LC_ALL=C`` (stable, parseable messages), stdin
closed (git never waits on a prompt) and text decoded as UTF-8 with ``errors="replace"``
(file names and messages need not be valid UTF-8). A failing call raises
``fractal.errors.GitError`` whose message carries git's own stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from fractal.errors import GitError
from fractal.workspace.artifacts import is_runtime_artifact
from fractal.workspace.gitfiles import (
    GIT_LOCATION_ENV,
    SHA,
    git_dirs,
    loose_ref,
    read_ref_file,
    safe_branch,
    surely_absent,
)
from fractal.workspace.gitguard import guard_env
from fractal.workspace.objects import commit_known, remember

__all__ = [
    "GIT_LOCATION_ENV",
    "branch_exists",
    "changed_paths",
    "commit_files",
    "common_dir",
    "current_branch",
    "git_dirs",
    "git_env",
    "gitlink_excludes",
    "gitlinks",
    "has_remote",
    "head_after_commit",
    "head_sha",
    "is_dirty",
    "log_subjects",
    "parse_status",
    "repo_root",
    "run_git",
    "run_git_bytes",
    "toplevel",
    "tracked_changes",
    "worktree_status",
]


def git_env(extra: Mapping[str, str] | None = None,
            cwd: Path | None = None, *, live: bool = False) -> dict[str, str]:
    """This process's environment plus ``LC_ALL=C``, ``GIT_TERMINAL_PROMPT=0``, ``extra``
    and the overrides that keep the repository's programs (hooks, fsmonitor, filters,
    drivers of the repository at ``cwd``) from running (``gitguard.guard_env``; none
    inside ``gitguard.repository_programs()``). ``live`` adds the nodes' private object
    dirs as alternates: only for a git that reads for display and writes nothing. Raises
    GitError when a repository config file is too long to scan (``gitguard.CONFIG_CAP``)."""
    env = dict(os.environ)
    env.update({"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"})
    if extra:
        env.update(extra)
    guard_env(env, cwd, live=live)
    return env


def run_git(args: Sequence[str], cwd: Path, *, check: bool = True,
            env: Mapping[str, str] | None = None,
            stdin: str | None = None, live: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``git -C <cwd> <args>`` and return the completed process (stdout/stderr as str).

    ``env`` entries are added on top of the inherited environment (after ``LC_ALL=C``);
    ``stdin`` is fed to git's standard input (else it reads an empty one). Git reads the
    shared object store alone unless ``live`` (a read for display that writes nothing:
    the nodes' private object dirs as alternates, ``gitguard``).
    With ``check`` (default) a non-zero exit raises GitError naming the command, the
    directory, the exit code and git's stderr. A missing git binary always raises GitError,
    and so does a repository config file too long to scan (``git_env``), before git runs.
    """
    argv = ["git", "-C", str(cwd), *args]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, encoding="utf-8", errors="replace",
            env=git_env(env, cwd, live=live), check=False,
            **({"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}),
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH; install git and retry") from exc
    if check and proc.returncode != 0:
        detail = proc.stderr.strip() or proc.stdout.strip() or "(no output)"
        command = " ".join(args)
        if len(command) > 120:  # e.g. git add with every exclude pathspec
            command = command[:117] + "..."
        raise GitError(f"git {command} failed in {cwd} (exit {proc.returncode}): {detail}")
    return proc


def run_git_bytes(args: Sequence[str], cwd: Path, stdin: bytes | None = None) -> bytes:
    """``git -C cwd args`` with bytes in and out (blob contents); its stdout; GitError if it fails."""
    proc = subprocess.run(["git", "-C", str(cwd), *args], input=stdin, capture_output=True,
                          env=git_env(cwd=cwd), check=False)
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip() or "(no output)"
        raise GitError(f"git {' '.join(args)} failed in {cwd} (exit {proc.returncode}): {detail}")
    return proc.stdout


def _out(args: Sequence[str], cwd: Path) -> str:
    return run_git(args, cwd).stdout.strip()


def toplevel(cwd: Path) -> Path:
    """Return the absolute root of the worktree containing ``cwd``. Raises GitError outside
    one (saying so plainly when ``cwd`` is in no repository at all)."""
    proc = run_git(["rev-parse", "--show-toplevel"], cwd, check=False)
    if proc.returncode != 0 and "not a git repository" in proc.stderr:
        raise GitError(f"{cwd.resolve()} is not inside a git repository; run fractal from "
                       "your project's repository (or pass --path DIR)")
    if proc.returncode != 0:
        run_git(["rev-parse", "--show-toplevel"], cwd)  # raises with git's own message
    return Path(proc.stdout.strip())


def common_dir(cwd: Path) -> Path:
    """Return the absolute git common dir (``R/.git``) shared by every worktree of the repo."""
    return Path(_out(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd))


def repo_root(cwd: Path) -> Path:
    """Return the main worktree of the repository that ``cwd`` belongs to.

    That is the parent of the common dir (``R`` for ``R/.git``), taken from the first entry of
    ``git worktree list`` so a relocated git dir is handled too. Raises GitError for a bare
    repository (fractal needs a main working tree).
    """
    first = run_git(["worktree", "list", "--porcelain"], cwd).stdout.split("\n\n", 1)[0]
    lines = first.splitlines()
    if "bare" in lines or not lines or not lines[0].startswith("worktree "):
        raise GitError(f"the repository of {cwd} is bare; fractal needs a main working tree")
    return Path(lines[0][len("worktree "):])


def git_paths(cwd: Path, names: Sequence[str]) -> tuple[Path, ...]:
    """Where git keeps each of ``names`` (``MERGE_HEAD``, a lock file) for the worktree at
    ``cwd``: absolute paths in its own git dir. When ``cwd`` is a checkout's top
    (``git_dirs``) and every name is one git keeps per worktree (``MERGE_HEAD`` and the
    other operations' state files, ``index``, ``index.lock``, ``fractal-commit.lock``),
    they are joined to its git dir with no git process; else they come from one ``rev-parse``, and as a worktree's git dir does
    not move while it exists, that answer is kept while its directory is there (a
    supervisor asks after every iteration). A symbolic link at a name is never resolved: the
    path is where the link is, so a write renamed there replaces it. Raises GitError."""
    dirs = git_dirs(cwd)
    if dirs is not None and all(_PER_WORKTREE.fullmatch(name) for name in names):
        return tuple(dirs[0] / name for name in names)
    key = (Path(cwd).resolve(), tuple(names), os.environ.get("GIT_INDEX_FILE"))
    found = _GIT_PATHS.get(key)
    if found is None or not all(p.parent.is_dir() for p in found):  # a worktree re-made
        args = [arg for name in names for arg in ("--git-path", name)]
        # not --path-format=absolute: that resolves a symbolic link at the name itself
        out = run_git(["rev-parse", *args], cwd).stdout
        found = tuple(Path(cwd).absolute() / line for line in out.splitlines())
        _GIT_PATHS[key] = found
    return found


_GIT_PATHS: dict[tuple[Path, tuple[str, ...], str | None], tuple[Path, ...]] = {}

# Names git keeps in the worktree's own git dir whatever the configuration: the state
# files of an operation in progress, the index and lock files, never one of the shared
# names git moves to the common dir (refs, logs, objects, hooks, info, config, ...).
# GIT_INDEX_FILE, which moves the index, makes git_dirs None (git is asked).
_PER_WORKTREE = re.compile(r"(MERGE|CHERRY_PICK|REVERT)_HEAD|rebase-(merge|apply)"
                           r"|index|(index|fractal-commit)\.lock")


def current_branch(cwd: Path) -> str | None:
    """Return the short name of the checked-out branch, or None when HEAD is detached.

    Read from the worktree's ``HEAD`` file when ``cwd`` is a checkout's top (``git_dirs``)
    and it names a branch whose loose ref holds an id or is absent (unborn, or packed:
    a packed ref is never symbolic); anything unusual (a symlinked HEAD or ref, a branch
    that is itself a symbolic ref to another, a symbolic ref outside ``refs/heads/``, ref
    storage other than files) is asked of git, which follows aliases to the real branch."""
    dirs = git_dirs(cwd)
    if dirs is not None:
        head = read_ref_file(dirs[0] / "HEAD") or ""
        name = head[len("ref: refs/heads/"):]
        if head.startswith("ref: refs/heads/") and safe_branch(name):
            ref = read_ref_file(dirs[1] / "refs" / "heads" / name)
            if ref is None or SHA.fullmatch(ref):
                return name
        elif SHA.fullmatch(head):
            return None
    proc = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd, check=False)
    if proc.returncode == 1:
        return None
    if proc.returncode != 0:
        run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd)  # raises with stderr
    return proc.stdout.strip()


def head_sha(cwd: Path, ref: str = "HEAD") -> str:
    """Return the full commit sha ``ref`` points at. Raises GitError when it names no commit."""
    return _out(["rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"], cwd)


def head_after_commit(cwd: Path) -> str:
    """The sha of the commit just made in ``cwd``: read from the files when ``cwd`` is a
    checkout's top and ``HEAD`` names a branch (git writes that branch's ref as a loose
    file holding the new commit with every commit), else ``head_sha(cwd)``."""
    branch = current_branch(cwd) if git_dirs(cwd) is not None else None
    return (_loose_ref_sha(cwd, branch) if branch else None) or head_sha(cwd)


def branch_tip(cwd: Path, branch: str) -> str:
    """The full sha the local branch ``branch`` points at: its loose ref file's when
    ``cwd`` is a checkout's top and the file holds a commit (``_loose_ref_sha``: no git
    process for a loose commit or one seen before), else ``head_sha(cwd, branch)``,
    which peels a tag. Raises GitError when it names no commit."""
    return _loose_ref_sha(cwd, branch) or head_sha(cwd, branch)


def _loose_ref_sha(cwd: Path, branch: str) -> str | None:
    """The commit id ``refs/heads/<branch>``'s loose ref file holds (``gitfiles.loose_ref``)
    when it is a commit git would take: the loose object files tell
    (``objects.commit_known``: no git process), or, where they cannot (a packed object,
    alternates, replace refs), one ``rev-parse <id>^{commit}`` does and a yes is kept for
    this process. None otherwise (no loose ref; a tag, a missing or corrupt object), and
    the caller asks git its own question."""
    found = loose_ref(cwd, branch)
    if found is None:
        return None
    common, sha = found
    known = commit_known(common, sha)
    if known is None:
        proc = run_git(["rev-parse", "--verify", "--quiet", "--end-of-options",
                        f"{sha}^{{commit}}"], cwd, check=False)
        known = proc.returncode == 0 and proc.stdout.strip() == sha
        if known:
            remember(common, sha)
    return sha if known else None


def branch_exists(cwd: Path, branch: str) -> bool:
    """Tell whether the local branch ``refs/heads/<branch>`` exists.

    A loose ref file holding a commit id answers yes without running git (a loop asks
    before every step); no ref file and no ``packed-refs`` file at all answers no (a
    spawn asks before making the branch); a packed ref, or a missing one while refs are
    packed, is asked of git."""
    if _loose_ref_sha(cwd, branch) is not None:
        return True
    if surely_absent(cwd, branch):
        return False
    proc = run_git(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cwd, check=False)
    return proc.returncode == 0


def changed_paths(cwd: Path) -> list[str]:
    """Return every changed path in the worktree: modified, staged, deleted and untracked.

    Paths are repo-relative posix strings in ``git status`` order, each once; both sides of a
    rename or copy are listed. Ignored files and runtime artifacts
    (``artifacts.is_runtime_artifact``) are left out, so a worktree holding only artifacts
    reads as clean.
    """
    return worktree_status(cwd)[0]


def worktree_status(cwd: Path) -> tuple[list[str], bool]:
    """(``changed_paths``, whether the index matches HEAD) from one ``git status``.

    The second value is True when no entry has an index-side change: then nothing is
    staged (``git diff --cached`` would list nothing) and no path is unmerged, so a caller
    need not ask git either question. ``--no-optional-locks``: the status does not write
    its refreshed stat cache back to the index, so it never takes ``index.lock`` (an agent's
    own git is not refused for it) and skips that write; the answer is the same."""
    return parse_status(run_git(STATUS_ARGS, cwd).stdout)


STATUS_ARGS = ["--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--ignore-submodules=dirty"]
"""The one ``git status`` fractal reads changes from. ``--ignore-submodules=dirty``: a
gitlink counts as changed when its commit differs, and git never runs a ``git status``
inside a nested repository (which would run that repository's own filters: a submodule's
``ignore`` in ``.gitmodules`` cannot turn this back on, the command line wins)."""


def gitlinks(cwd: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """The repo-relative paths of the gitlinks (nested repositories and submodules, mode
    160000) in the index of ``cwd`` (``env``'s ``GIT_INDEX_FILE`` if set). One
    ``git ls-files``, which never looks inside them. Raises GitError."""
    out = run_git(["ls-files", "--stage", "-z"], cwd, env=env).stdout
    return [entry.split("\t", 1)[1] for entry in out.split("\0")
            if entry.startswith("160000 ") and "\t" in entry]


def gitlink_excludes(cwd: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """One ``:(exclude,literal,top)<path>`` pathspec per gitlink of ``gitlinks``, for a
    ``git add`` to append: ``git add`` over a gitlink runs ``git status`` inside the
    nested repository whatever the config says, and that child git runs the programs the
    nested repository configures (its filters). So fractal never stages a gitlink; [] when
    there is none. Raises GitError."""
    return [f":(exclude,literal,top){path}" for path in gitlinks(cwd, env)]


def parse_status(out: str) -> tuple[list[str], bool]:
    """(changed paths, whether the index matches HEAD) from ``STATUS_ARGS``'s output."""
    fields = out.split("\0")
    paths: list[str] = []
    seen: set[str] = set()
    index_clean = True
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        status, path = entry[:2], entry[3:]
        if status[0] not in " ?":
            index_clean = False
        found = [path]
        if "R" in status or "C" in status:  # the next field is the source path
            if i < len(fields):
                found.append(fields[i])
            i += 1
        for item in found:
            if item and item not in seen and not is_runtime_artifact(item):
                seen.add(item)
                paths.append(item)
    return paths, index_clean


def tracked_changes(cwd: Path) -> list[str]:
    """Like ``changed_paths``, without untracked files: what a checkout could clobber.
    From the same one ``git status``: its untracked entries (``??``) are left out."""
    out = run_git(STATUS_ARGS, cwd).stdout
    fields = out.split("\0")
    untracked: set[str] = set()
    i = 0
    while i < len(fields):  # the records as parse_status reads them
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        if entry.startswith("?? "):
            untracked.add(entry[3:])
        elif "R" in entry[:2] or "C" in entry[:2]:
            i += 1  # the source path of a rename or copy
    return [p for p in parse_status(out)[0] if p not in untracked]


def is_dirty(cwd: Path) -> bool:
    """Tell whether the worktree has any change that is not a runtime artifact."""
    return bool(changed_paths(cwd))


def log_subjects(cwd: Path, ref: str, limit: int) -> list[str]:
    """Return the subjects of the newest ``limit`` commits reachable from ``ref``, newest first.

    Returns ``[]`` when ``limit`` is not positive. Raises GitError when ``ref`` is unknown.
    """
    if limit <= 0:
        return []
    out = run_git(["log", f"--max-count={limit}", "--format=%s", "--end-of-options", ref, "--"],
                  cwd).stdout
    return out.splitlines()


def commit_files(cwd: Path, sha: str) -> tuple[str, ...]:
    """The paths commit ``sha`` changes against its first parent (every path of a root
    commit), renames as delete plus add. A merge commit counts what it brought to the
    branch it was made on, not zero."""
    parents = _out(["rev-list", "--parents", "--max-count=1", sha], cwd).split()[1:]
    base = [parents[0]] if parents else ["--root"]
    out = run_git(["diff-tree", "-r", "--no-commit-id", "--name-only", "-z", "--no-renames",
                   *base, sha], cwd).stdout
    return tuple(dict.fromkeys(p for p in out.split("\0") if p))


def show_file(cwd: Path, ref: str, path: str) -> str | None:
    """The text of ``path`` (relative to the repository root) in commit ``ref``, or None
    when the commit holds no such file."""
    done = run_git(["show", f"{ref}:{path}"], cwd, check=False)
    return done.stdout if done.returncode == 0 else None


def has_remote(cwd: Path, name: str = "origin") -> bool:
    """Tell whether a remote called ``name`` is configured for the repository."""
    return name in _out(["remote"], cwd).splitlines()
