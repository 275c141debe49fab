"""The branch refs around a sandboxed launch (``domain.refguard`` gives the rule): the
loose files of branches kept only in ``packed-refs`` made before it (``pin_packed``), the
symbolic refs and left-behind locks under ``refs/heads`` undone after it (``repair``).
Reads and writes the files of git's files backend directly (a launch must stay cheap:
no git process unless something is repaired)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from fractal.domain.refguard import (
    last_logged,
    packed_branches,
    read_ref,
    repair_of,
    restore_recorded,
    stale_lock,
)
from fractal.workspace.git import run_git

__all__ = ["Guard", "checked_out", "own_sha", "pin_packed", "ref_locks", "repair"]


def _heads(common: Path) -> Path:
    return common / "refs" / "heads"


def _packed(common: Path) -> dict[str, str]:
    try:
        text = (common / "packed-refs").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}
    return packed_branches(text)


def pin_packed(common: Path) -> list[str]:
    """Give each branch only in ``<common>/packed-refs`` its loose ref file (the same
    sha), so the sandbox's read-only bind covers it; returns the branches pinned. Raises
    OSError when a file cannot be written."""
    pinned: list[str] = []
    for branch, sha in _packed(common).items():
        path = _heads(common) / branch
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(sha + "\n")
        pinned.append(branch)
    return pinned


def own_sha(common: Path, branch: str) -> str | None:
    """The sha ``branch`` points at (loose file, else ``packed-refs``); None when it is
    symbolic, broken or absent."""
    try:
        text = (_heads(common) / branch).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return _packed(common).get(branch)
    except OSError:
        return None
    return read_ref(text).sha or None


def ref_locks(common: Path) -> set[str]:
    """Every ``*.lock`` under ``refs/heads`` (paths relative to it)."""
    heads = _heads(common)
    found: set[str] = set()
    for top, _dirs, files in os.walk(heads):
        found |= {os.path.relpath(os.path.join(top, name), heads)
                  for name in files if name.endswith(".lock")}
    return found


def _branch_files(common: Path) -> set[str]:
    """Every loose branch ref under ``refs/heads`` (names relative to it), locks aside."""
    heads = _heads(common)
    found: set[str] = set()
    for top, _dirs, files in os.walk(heads):
        found |= {os.path.relpath(os.path.join(top, name), heads)
                  for name in files if not name.endswith(".lock")}
    return found


def _worktrees(common: Path, besides: Path) -> dict[str, Path]:
    """branch -> the git dir of the linked worktree whose HEAD names it
    (``<common>/worktrees/*/HEAD``), the git dir ``besides`` (the launched node's own,
    which its agent can write) not counted."""
    found: dict[str, Path] = {}
    try:
        admin = list((common / "worktrees").iterdir())
    except OSError:
        return found
    for git_dir in admin:
        if git_dir.resolve() == besides.resolve():
            continue
        try:
            target = read_ref((git_dir / "HEAD").read_text(encoding="utf-8")).symbolic
        except OSError:
            continue
        if target.startswith("refs/heads/"):
            found[target[len("refs/heads/"):]] = git_dir
    return found


def checked_out(common: Path, *, besides: Path) -> set[str]:
    """The branches the HEAD of a linked worktree names (``<common>/worktrees/*/HEAD``),
    the one of the git dir ``besides`` (the launched node's own, which its agent can
    write) not counted."""
    return set(_worktrees(common, besides))


_LOG_TAIL = 4096  # bytes of a HEAD reflog read for its newest entry


def _recorded(git_dir: Path) -> str | None:
    """The newest sha of the worktree git dir's ``logs/HEAD`` (None: none)."""
    try:
        with (git_dir / "logs" / "HEAD").open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - _LOG_TAIL))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return last_logged(text)


def _is_advance(repo: Path, sha: str, base: str) -> bool:
    """Whether commit ``sha`` has ``base`` as its first parent and the same tree (a merge
    base advance, ``mergebase.advance_base``)."""
    proc = run_git(["rev-parse", "--verify", "--quiet", f"{sha}^1", f"{sha}^{{tree}}",
                    f"{base}^{{tree}}"], repo, check=False)
    found = proc.stdout.split()
    return proc.returncode == 0 and len(found) == 3 and found[0] == base \
        and found[1] == found[2]


class Guard:
    """What ``pin_packed`` and the look before a launch of ``own`` (a node of the tree
    ``root``) saw: the node's own sha, the branches and the ref locks that were there."""

    def __init__(self, common: Path, own: str, root: str) -> None:
        self.common, self.own, self.root = common, own, root
        pin_packed(common)
        self.own_before = own_sha(common, own)
        self.branches_before = _branch_files(common)
        self.locks_before = ref_locks(common)


def repair(guard: Guard, repo: Path, known: Callable[[str], bool], *,
           besides: Path | None = None) -> list[str]:
    """Undo what the launch did to the branch refs (``domain.refguard``); ``known`` says
    whether a branch made during the launch has an owner (asked only of those), and an
    owned one is checked against its worktree's ``HEAD`` reflog, the launched node's own
    git dir ``besides`` not counted. Returns what was restored, one text each
    (``refs/heads/X: why``). A repair git refuses is left and named as such."""
    heads = _heads(guard.common)
    done: list[str] = []
    worktrees: dict[str, Path] | None = None
    now = time.time()
    for top, dirs, files in os.walk(heads):
        for name in [d for d in dirs if d.endswith(".lock")]:  # git's locks are files
            dirs.remove(name)
            rel = os.path.relpath(Path(top) / name, heads)
            shutil.rmtree(Path(top) / name, ignore_errors=True)
            done.append(f"refs/heads/{rel}: a directory in a lock's place, removed")
        for name in files:
            path = Path(top) / name
            rel = os.path.relpath(path, heads)
            if name.endswith(".lock"):
                try:
                    age = now - path.lstat().st_mtime
                except OSError:
                    continue
                if stale_lock(age, new=rel not in guard.locks_before):
                    path.unlink(missing_ok=True)
                    done.append(f"refs/heads/{rel}: a lock left behind, removed")
                continue
            try:
                found = read_ref(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            new = rel not in guard.branches_before
            owned = known(rel) if new and not found.symbolic and rel != guard.own else True
            target = repair_of(rel, found, guard.own, guard.own_before, new=new, known=owned,
                               root=guard.root)
            why = f"symbolic ({found.symbolic})" if found.symbolic else \
                "made during the launch, no node's"
            if target is None and new and owned and rel != guard.own and found.sha:
                if worktrees is None:
                    worktrees = _worktrees(guard.common, besides or guard.common)
                recorded = _recorded(worktrees[rel]) if rel in worktrees else None
                target = restore_recorded(found, recorded, advance=bool(
                    recorded and recorded != found.sha and _is_advance(repo, found.sha,
                                                                       recorded)))
                why = "moved during the launch, not in its own worktree"
            if target is None:
                continue
            ref = f"refs/heads/{rel}"
            args = (["update-ref", "--no-deref", "-m", "fractal: ref restored", ref, target]
                    if target else ["update-ref", "--no-deref", "-d", ref])
            proc = run_git(args, repo, check=False)
            what = f"set back to {target[:12]}" if target else "deleted"
            if proc.returncode != 0 and not target and new and not found.sha:
                _remove_ref_file(path, heads)  # no commit in it: git will not delete it
                what = "deleted (not a ref git could read)"
            elif proc.returncode != 0:
                what = f"could not be repaired ({proc.stderr.strip()[:120]})"
            done.append(f"{ref}: {why}, {what}")
    return done


def _remove_ref_file(path: Path, heads: Path) -> None:
    """Unlink a branch ref file that holds no ref, then its emptied directories up to
    ``heads`` (a directory left in a node's name blocks ``git branch`` of that name)."""
    path.unlink(missing_ok=True)
    at = path.parent
    while at != heads and at.is_relative_to(heads):
        try:
            at.rmdir()
        except OSError:
            return
        at = at.parent
