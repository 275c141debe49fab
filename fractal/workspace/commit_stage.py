"""Scoped staging and the never-blocking warnings of ``fractal commit``.

Staging adds the whole worktree (unscoped) with the shared runtime artifact excludes
(``artifacts.exclude_pathspecs``: one definition with the backstop), or, for a scoped node,
each changed path under an allowed root by name (``add_paths``: git skips new files inside
an untracked directory when a directory pathspec is combined with the ``**/.``-style
exclude pathspecs, so naming the files is the reliable way). Any artifact somebody staged
by hand is unstaged again. The warnings name paths that tracked ignore
rules keep out of the commit and staged files of LARGE_FILE bytes or more.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fractal.workspace.artifacts import exclude_pathspecs, is_runtime_artifact, is_tool_cache
from fractal.workspace.commit_scope import covered
from fractal.workspace.commit_types import listing
from fractal.workspace.git import changed_paths, gitlink_excludes, gitlinks, run_git
from fractal.workspace.nodelinks import drop_staged_links

__all__ = [
    "LARGE_FILE",
    "add_paths",
    "ignored_warning",
    "large_files_warning",
    "links_warning",
    "nothing_staged",
    "stage",
    "staged_paths",
]

LARGE_FILE = 10 * 1024 * 1024
"""Bytes from which a staged file draws a warning (10 MiB)."""
WARN_CAP = 10
"""Most paths one warning names."""
_CHECK_CAP = 500  # most ignored entries handed to `git check-ignore` in one call
_WHOLE = [":(top)"]  # the pathspec for the whole worktree, from any directory
_RULE = re.compile(r"^(?P<source>.*?):(?P<line>\d+):(?P<pattern>.*)\t(?P<path>.*)$")


def _literal(path: str) -> str:
    return f":(top,literal){path}"


def add_paths(worktree: Path, paths: Sequence[str]) -> None:
    """``git add --all`` exactly ``paths`` (repo-relative, taken literally; a deleted path
    stages its removal), never a gitlink or a path under one (``git.gitlink_excludes``:
    git would run ``git status`` inside the nested repository). The list goes through a
    temporary pathspec file, so any number of paths fits. Raises GitError."""
    links = gitlinks(worktree) if paths else []
    paths = [p for p in paths if not any(p == link or p.startswith(link + "/")
                                         for link in links)]
    if not paths:
        return
    fd, name = tempfile.mkstemp(prefix="fractal-add-", suffix=".lst")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"\0".join(p.encode("utf-8", errors="surrogateescape")
                                    for p in paths))
        run_git(["--literal-pathspecs", "add", "--all", f"--pathspec-from-file={name}",
                 "--pathspec-file-nul"], worktree)
    finally:
        os.unlink(name)


def stage(worktree: Path, roots: Sequence[str] | None) -> list[str]:
    """Stage every change under ``roots`` (None: the whole worktree), never an artifact
    and never a link under ``.fractal/``; the link entries dropped (worktree-relative
    paths, usually ``[]``).

    Scoped, the changed paths under the roots are named one by one (``add_paths``). Artifacts
    already in the index are unstaged again. A symbolic link or gitlink at or under
    ``.fractal`` (staged by hand, or already on the branch) is removed from the index, so
    the commit deletes it (``nodelinks.drop_staged_links``). Raises GitError.
    """
    if roots is None:
        run_git(["add", "--all", "--", *_WHOLE, *exclude_pathspecs(), *gitlink_excludes(worktree)],
                worktree)
    else:
        add_paths(worktree, [p for p in changed_paths(worktree) if covered(p, roots)])
    staged = staged_paths(worktree)
    artifacts = [p for p in staged if is_runtime_artifact(p)]
    if artifacts:
        run_git(["reset", "--quiet", "--", *map(_literal, artifacts)], worktree)
    return drop_staged_links(worktree, staged)


def links_warning(dropped: Sequence[str]) -> str | None:
    """The warning for link entries under ``.fractal/`` a commit left out, None for none."""
    if not dropped:
        return None
    return (f"not committing {listing(list(dropped))}: a symbolic link or submodule under "
            ".fractal/ is never committed (a node directory must be a real directory); "
            "the commit removes it from the branch")


def staged_paths(worktree: Path) -> list[str]:
    """Return the repo-relative paths staged in ``worktree``'s index (renames as add+delete)."""
    out = run_git(["diff", "--cached", "--name-only", "-z", "--no-renames"], worktree).stdout
    return [p for p in out.split("\0") if p]


def nothing_staged(worktree: Path) -> bool:
    """Tell whether the index equals HEAD (``git diff --cached --quiet``)."""
    return run_git(["diff", "--cached", "--quiet"], worktree, check=False).returncode == 0


def _tracked(worktree: Path, sources: set[str]) -> set[str]:
    """The subset of ignore-rule ``sources`` (as ``check-ignore`` prints them) git tracks."""
    relative: dict[str, str] = {}
    top = worktree.resolve()
    for source in sources:
        path = Path(source)
        if path.is_absolute():
            try:
                relative[path.resolve().relative_to(top).as_posix()] = source
            except ValueError:
                continue  # a global or info/exclude file outside the worktree
        elif not source.startswith(".git/"):
            relative[source] = source
    if not relative:
        return set()
    out = run_git(["ls-files", "-z", "--", *map(_literal, relative)], worktree,
                  check=False).stdout
    return {relative[p] for p in out.split("\0") if p in relative}


def ignored_warning(worktree: Path, roots: Sequence[str] | None) -> str | None:
    """Warn about paths under ``roots`` (None: everywhere) that tracked ignore rules eat.

    A path counts when ``git status --ignored=matching`` lists it, it is not a runtime
    artifact nor a tool's cache (``.pytest_cache/``, ignored on purpose), and the rule that ignores it comes from a tracked file (a committed
    ``.gitignore``; never ``info/exclude`` or a global excludes file). Returns the warning
    text naming up to WARN_CAP paths with their rules, or None.
    """
    specs = _WHOLE if roots is None else [_literal(r) for r in roots if (worktree / r).exists()]
    if not specs:
        return None
    out = run_git(["status", "--porcelain=v1", "-z", "--ignored=matching", "--ignore-submodules=dirty",
                   "--untracked-files=all", "--", *specs], worktree).stdout
    ignored = [e[3:] for e in out.split("\0") if e.startswith("!! ")]
    ignored = [p for p in ignored
               if not is_runtime_artifact(p) and not is_tool_cache(p)][:_CHECK_CAP]
    if not ignored:
        return None
    proc = run_git(["-c", "core.quotePath=false", "check-ignore", "-v", "--", *ignored],
                   worktree, check=False)
    rules = [m for m in map(_RULE.match, proc.stdout.splitlines()) if m]
    tracked = _tracked(worktree, {m["source"] for m in rules})
    eaten = [f"{m['path']} ({m['source']}:{m['line']}: {m['pattern']})"
             for m in rules if m["source"] in tracked]
    if not eaten:
        return None
    return (f"{len(eaten)} path(s) are ignored by tracked ignore rules and were not "
            f"committed: {listing(eaten, WARN_CAP)}; `git add -f PATH` commits one on purpose")


def large_files_warning(worktree: Path, staged: Sequence[str]) -> str | None:
    """Warn about staged files of LARGE_FILE bytes or more (size of the worktree copy)."""
    big: list[str] = []
    for path in staged:
        target = worktree / path
        try:
            if target.is_symlink() or not target.is_file():
                continue
            size = target.stat().st_size
        except OSError:
            continue
        if size >= LARGE_FILE:
            big.append(f"{path} ({size / (1024 * 1024):.1f} MB)")
    if not big:
        return None
    return (f"{len(big)} staged file(s) of 10 MB or more: {listing(big, WARN_CAP)}; large "
            "files bloat the repository for good (consider git LFS or leaving them out)")
