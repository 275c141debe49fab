"""Rescue refs: save a branch and its worktree's unsaved files before anything destroys them.

A rescue is a commit on ``refs/fractal/rescue/<branch>/<UTC stamp>`` whose first parent is
the branch tip and whose tree is the tip plus every uncommitted change of the worktree:
modified, staged, deleted and untracked files (ignored files and runtime artifacts, which
the exclude block ignores, stay out). It is built without touching the worktree, its real
index or HEAD: a temporary index (``GIT_INDEX_FILE``) is seeded from the real one (or from
HEAD when there is none), ``git add -A`` fills it from the worktree, then ``write-tree``,
``commit-tree`` and ``update-ref`` record it. Seeding from the real index rather than from
HEAD keeps files that were force-added although ignored, and lets ``add -A`` reuse the
index's stat cache; unmerged entries are resolved to the worktree's bytes (conflict
markers included), so a half-done merge is saved exactly as it stands.

Refs live in the repository's common ref store, so every worktree sees them and they
survive the deletion of the branch, the worktree and the database. ``git gc`` never prunes
them (they are refs). Restore with ``git branch NAME <ref>`` (``restore_branch``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fractal.errors import FractalError, GitError
from fractal.workspace.git import git_paths, gitlinks, head_sha, run_git
from fractal.workspace.nested import gitlinks_holding_history, nested_repositories

__all__ = [
    "RESCUE_PREFIX",
    "Rescue",
    "RescueRef",
    "files_of",
    "held_history",
    "list_rescue_refs",
    "operation_of",
    "rescue",
    "rescue_branch",
    "restore_branch",
    "stamp_iso",
    "stamp_of",
]

RESCUE_PREFIX = "refs/fractal/rescue/"
"""Every rescue ref lives under this prefix: ``refs/fractal/rescue/<branch>/<stamp>``."""

_IDENTITY = {
    "GIT_AUTHOR_NAME": "fractal rescue", "GIT_AUTHOR_EMAIL": "rescue@fractal.invalid",
    "GIT_COMMITTER_NAME": "fractal rescue", "GIT_COMMITTER_EMAIL": "rescue@fractal.invalid",
}
"""A fixed identity for rescue commits: they work on machines with no ``user.email``, and
``git log`` tells them from the agents' and the operator's commits."""


@dataclass(frozen=True)
class Rescue:
    """A written rescue ref.

    ``ref`` is the full ref name, ``sha`` the rescue commit, ``tip`` the branch tip it
    extends, ``files`` the repo-relative paths whose content differs from the tip (what the
    rescue saved beyond the branch; empty for a clean worktree), ``operation`` the
    destructive verb it ran before (``delete``, ``reset``, ...), ``instant`` its UTC time.
    """

    branch: str
    operation: str
    ref: str
    sha: str
    tip: str
    files: tuple[str, ...]
    instant: datetime


@dataclass(frozen=True)
class RescueRef:
    """A rescue ref found in the repository: name, commit, branch, and its first line."""

    ref: str
    sha: str
    branch: str
    stamp: str
    subject: str
    body: str = ""


_STAMP = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)\.(\d{3})Z")
_SUBJECT = re.compile(r"rescue \S+ before (\S.*)")
_FILES = re.compile(r"(\d+) unsaved file\(s\)")


def stamp_iso(stamp: str) -> str:
    """``2026-12-01T10:15:03.123Z`` for the ref stamp ``20261201T101503.123Z`` (a ``-2``
    suffix of a second rescue in one millisecond dropped); ``stamp`` itself when it has
    another shape."""
    found = _STAMP.match(stamp)
    if found is None:
        return stamp
    y, mo, d, h, mi, s, ms = found.groups()
    return f"{y}-{mo}-{d}T{h}:{mi}:{s}.{ms}Z"


def operation_of(subject: str) -> str | None:
    """The verb a rescue commit's subject (``rescue main.a before delete``) names, or None."""
    found = _SUBJECT.fullmatch(subject.strip())
    return found.group(1) if found else None


def files_of(body: str) -> int | None:
    """The unsaved-file count a rescue commit's body starts with, or None."""
    found = _FILES.match(body.strip())
    return int(found.group(1)) if found else None


def stamp_of(instant: datetime) -> str:
    """The ref-safe UTC stamp of ``instant``: ``20261201T101503.123Z`` (milliseconds).

    A naive ``instant`` is taken as UTC. Sorting stamps as text sorts them in time.
    """
    moment = instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)
    return moment.strftime("%Y%m%dT%H%M%S.") + f"{moment.microsecond // 1000:03d}Z"


def rescue(worktree: Path, branch: str, operation: str, *,
           instant: datetime | None = None, tip_ref: str | None = None) -> Rescue:
    """Write a rescue ref of ``branch`` holding every unsaved file of ``worktree``.

    ``worktree`` is the checkout whose files are saved (a node's worktree, or the main
    checkout for the root). The worktree, its index and HEAD are left exactly as they were.
    When the worktree's HEAD is not the branch tip (a detached HEAD mid-rebase), that commit
    becomes the rescue commit's second parent, so neither history is lost. ``instant``
    defaults to now. ``tip_ref`` is the commit the rescue extends, ``refs/heads/<branch>``
    by default (``HEAD`` for a checkout whose branch was renamed or deleted away: its files
    and what it has checked out are saved under the node's name). Raises GitError when the
    tip names no commit or git fails, and
    FractalError when ``worktree`` is not a directory.
    """
    if not worktree.is_dir():
        raise FractalError(f"cannot rescue {branch}: its worktree {worktree} does not exist; "
                           "rescue the branch alone (rescue_branch)")
    when = instant or datetime.now(UTC)
    tip = head_sha(worktree, tip_ref or f"refs/heads/{branch}")
    head = _head_or_none(worktree)
    tree, links = _worktree_tree(worktree)
    parents = [tip] if head in (None, tip) else [tip, head]
    files = _changed(worktree, tip, tree)
    nested = nested_repositories(worktree, files)
    if nested:  # saved as bare gitlinks, their files would be lost with the worktree
        raise FractalError(
            f"cannot rescue {branch} before {operation}: {', '.join(nested[:5])} is a nested "
            "git repository, which a rescue ref would hold as a bare pointer without its "
            f"files; nothing was removed. Move it out of the worktree, or remove its "
            "`.git` and commit its files, then retry")
    held = gitlinks_holding_history(worktree, links)
    if held:  # committed as a gitlink: the commit it names lives only in that repository
        raise FractalError(f"cannot rescue {branch} before {operation}: {_held_why(held)}")
    subject = f"rescue {branch} before {operation}"
    return _write(worktree, branch, operation, when, tree, parents, files, subject, tip)


def held_history(worktree: Path) -> str | None:
    """Why removing ``worktree`` would lose history no rescue ref can hold, or None: a
    gitlink in its index (committed or staged, registered in ``.gitmodules`` or not) whose
    directory holds a repository of its own (``nested.gitlinks_holding_history``). One
    ``git ls-files``. The reason ends with what to do. Raises GitError."""
    held = gitlinks_holding_history(worktree, gitlinks(worktree))
    return _held_why(held) if held else None


def _held_why(held: list[str]) -> str:
    return (f"{', '.join(held[:5])} is a nested git repository committed (or staged) as a "
            "gitlink, whose history exists only in it (the branch and a rescue ref would "
            "hold just its commit id); nothing was removed. Move it out of the "
            f"worktree, or run `git rm --cached {held[0]}` there, remove its `.git` and "
            "commit its files, then retry")


def rescue_branch(repo: Path, branch: str, operation: str, *,
                  instant: datetime | None = None) -> Rescue:
    """Write a rescue ref of ``branch`` alone (no worktree, or one already gone).

    The rescue commit's tree is the tip's own tree, so ``files`` is empty. ``repo`` is any
    worktree of the repository. Raises GitError when ``branch`` names no commit.
    """
    when = instant or datetime.now(UTC)
    tip = head_sha(repo, f"refs/heads/{branch}")
    tree = run_git(["rev-parse", f"{tip}^{{tree}}"], repo).stdout.strip()
    return _write(repo, branch, operation, when, tree, [tip], (),
                  f"rescue {branch} before {operation}", tip)


def list_rescue_refs(repo: Path, branch: str | None = None) -> list[RescueRef]:
    """Every rescue ref of the repository (of ``branch`` only when given), oldest first.

    Sorted by stamp, then branch. Raises GitError when git fails.
    """
    pattern = RESCUE_PREFIX + (f"{branch}/" if branch else "")
    out = run_git(["for-each-ref", "--format=%(refname)%00%(objectname)%00%(subject)%00"
                   "%(contents:body)%00%01", pattern], repo).stdout
    found: list[RescueRef] = []
    for record in out.split("\0\x01"):
        parts = record.lstrip("\n").split("\0")
        if len(parts) != 4:
            continue
        ref, sha, subject, body = parts
        rest = ref[len(RESCUE_PREFIX):]
        name, _, stamp = rest.rpartition("/")
        if name:
            found.append(RescueRef(ref=ref, sha=sha, branch=name, stamp=stamp, subject=subject,
                                   body=body))
    return sorted(found, key=lambda r: (r.stamp, r.branch))


def restore_branch(repo: Path, ref: str, name: str) -> str:
    """Create branch ``name`` at the rescue ``ref``; return the commit sha.

    ``ref`` may be the full name or the part after ``refs/fractal/rescue/``. Raises
    FractalError when the ref is not a rescue ref or ``name`` already exists.
    """
    full = ref if ref.startswith(RESCUE_PREFIX) else RESCUE_PREFIX + ref
    try:
        sha = head_sha(repo, full)
    except GitError:
        raise FractalError(f"no rescue ref {full}; list them with `fractal rescue list`") \
            from None
    probe = run_git(["show-ref", "--verify", "--quiet", f"refs/heads/{name}"], repo, check=False)
    if probe.returncode == 0:
        raise FractalError(f"branch {name} already exists; pick another name with --as NAME")
    run_git(["branch", "--end-of-options", name, sha], repo)
    return sha


# ---- internals -----------------------------------------------------------------------


def _head_or_none(worktree: Path) -> str | None:
    proc = run_git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], worktree, check=False)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _worktree_tree(worktree: Path) -> tuple[str, list[str]]:
    """The tree object of the worktree's files as ``git add -A`` would stage them, built in
    a temporary index (the real index is copied, never written), and the gitlinks that
    index holds (repo-relative paths)."""
    real = git_paths(worktree, ["index"])[0]
    scratch_dir = Path(tempfile.mkdtemp(prefix="fractal-rescue-"))  # never inside .git
    try:
        index = scratch_dir / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        if real.is_file() and not real.is_symlink():  # never read through a planted link
            shutil.copyfile(real, index)
        elif _head_or_none(worktree) is not None:
            run_git(["read-tree", "HEAD"], worktree, env=env)
        links = gitlinks(worktree, env)
        run_git(["add", "-A", "--", ".", *(f":(exclude,literal,top){p}" for p in links)],
                _toplevel(worktree), env=env)
        tree = run_git(["write-tree"], worktree, env=env).stdout.strip()
        return tree, list(dict.fromkeys([*links, *gitlinks(worktree, env)]))  # + newly added
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def _toplevel(worktree: Path) -> Path:
    return Path(run_git(["rev-parse", "--show-toplevel"], worktree).stdout.strip())


def _changed(cwd: Path, tip: str, tree: str) -> tuple[str, ...]:
    out = run_git(["diff-tree", "-r", "-z", "--no-renames", "--name-only", tip, tree],
                  cwd).stdout
    return tuple(p for p in out.split("\0") if p)


def _write(cwd: Path, branch: str, operation: str, when: datetime, tree: str,
           parents: list[str], files: tuple[str, ...], subject: str, tip: str) -> Rescue:
    body = "\n".join(files[:200]) + (f"\n... and {len(files) - 200} more" if len(files) > 200
                                     else "")
    message = f"{subject}\n\n{len(files)} unsaved file(s)" + (f":\n{body}" if files else "")
    sha = _commit_tree(cwd, tree, parents, message)
    stamp = stamp_of(when)
    base = f"{RESCUE_PREFIX}{branch}/{stamp}"
    ref = base
    for n in range(2, 100):  # two rescues of one branch within a millisecond
        created = run_git(["update-ref", "--create-reflog", ref, sha, ""], cwd, check=False)
        if created.returncode == 0:
            break
        ref = f"{base}-{n}"
    else:
        raise GitError(f"cannot create a rescue ref under {base}: {created.stderr.strip()}")
    return Rescue(branch=branch, operation=operation, ref=ref, sha=sha, tip=tip, files=files,
                  instant=when)


def _commit_tree(cwd: Path, tree: str, parents: list[str], message: str) -> str:
    """``git commit-tree`` of ``tree`` on ``parents``; the message goes through a temporary
    file (``run_git`` closes stdin). Returns the new commit's sha."""
    fd, name = tempfile.mkstemp(prefix="fractal-rescue-msg-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(message + "\n")
        argv = ["commit-tree", "--no-gpg-sign", tree, "-F", name]  # no signing prompt
        for parent in parents:
            argv += ["-p", parent]
        return run_git(argv, cwd, env=_IDENTITY).stdout.strip()
    finally:
        os.unlink(name)

