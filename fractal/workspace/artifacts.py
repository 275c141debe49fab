"""The one definition of a runtime artifact: files the loop writes that git must never see.

Three consumers share this list so they can never drift apart (backstop commits and
the commit pipeline stage with the same excludes):

* ``nodedir.ensure_exclude_block`` writes it into ``<common_dir>/info/exclude``;
* ``exclude_pathspecs()`` turns it into ``git add`` exclude pathspecs (commit pipeline and
  backstop), so an artifact is never staged even when ``info/exclude`` is stale or emptied;
* ``is_runtime_artifact()`` filters ``git status`` output, so the clean check ignores them.

Patterns use gitignore syntax relative to a worktree root. A pattern with a slash before its
end is anchored there (node-dir files live at ``.fractal/<branch>/``); a pattern without one
matches a path component at any depth; a trailing slash means "a directory and everything
inside it". A pattern that names a directory also covers everything below it.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

__all__ = ["RUNTIME_ARTIFACTS", "TOOL_CACHES", "exclude_pathspecs", "is_runtime_artifact",
           "is_tool_cache"]

RUNTIME_ARTIFACTS: tuple[str, ...] = (
    # Node-directory runtime files (``<worktree>/.fractal/<branch>/...``).
    ".fractal/*/setup.log",
    ".fractal/*/supervisor.log",
    ".fractal/*/supervisor.log.1",
    ".fractal/*/pane.log",
    ".fractal/*/pane.log.1",
    ".fractal/*/*.err",
    ".fractal/*/tmp/",
    ".fractal/*/.session",
    ".fractal/*/.wake",
    ".fractal/*/.launch-env",
    ".fractal/*/config.json.lock",
    ".fractal/*/.handback",  # a conflict handed back by `node merge --hand-back`
    ".fractal/*/.claude/",  # agent homes (workspace.agenthomes): settings, sessions, auth link
    ".fractal/*/.codex/",
    # The project wiki's generated index: fractal writes it in every worktree (init, node
    # init, each commit's wiki step, `fractal wiki update`); no branch carries it, so no
    # scaffolding reaches the root's branch and no two merged copies meet.
    "wiki/_index.md",
    # Anywhere in a worktree.
    ".*.tmp",
    ".venv",
    "*.db",
    "*.db-wal",
    "*.db-shm",
    "*.db-journal",
    ".paused",
    ".status",
)
"""Gitignore-style patterns, relative to a worktree root (see the module docstring)."""

_MAGIC = ":(top,exclude,glob)"


def _split(pattern: str) -> tuple[list[str], bool, bool]:
    """Return ``(segments, anchored, dir_only)`` for one gitignore-style pattern."""
    dir_only = pattern.endswith("/")
    body = pattern.rstrip("/")
    anchored = "/" in body
    return body.lstrip("/").split("/"), anchored, dir_only


def exclude_pathspecs() -> list[str]:
    """Return RUNTIME_ARTIFACTS as git ``:(top,exclude,glob)`` pathspecs for ``git add``.

    Returns a list of strings such as ``:(top,exclude,glob)**/*.db/**``; pass them after
    ``--`` together with at least one positive pathspec (e.g. ``.``). Each pattern yields the
    spec for the path itself (unless the pattern is directory-only) and one for everything
    below it, because a glob pathspec matches whole paths, not leading directories.
    """
    specs: list[str] = []
    for pattern in RUNTIME_ARTIFACTS:
        segments, anchored, dir_only = _split(pattern)
        glob = "/".join(segments) if anchored else "**/" + "/".join(segments)
        if not any(c in glob for c in "*?["):  # a literal path: git add would refuse it as
            glob = f"{glob[:-1]}[{glob[-1]}]"  # an ignored file named on its command line
        if not dir_only:
            specs.append(_MAGIC + glob)
        specs.append(_MAGIC + glob + "/**")
    return specs


def _matches(pattern: str, parts: list[str]) -> bool:
    segments, anchored, dir_only = _split(pattern)
    # A directory-only pattern must match a proper parent of the path (status lists files).
    last = len(parts) - 1 if dir_only else len(parts)
    if anchored:
        n = len(segments)
        return n <= last and all(fnmatchcase(parts[i], segments[i]) for i in range(n))
    return any(fnmatchcase(parts[i], segments[0]) for i in range(last))


def is_runtime_artifact(path: str) -> bool:
    """Tell whether a repo-relative posix path is (or lies inside) a runtime artifact.

    ``path`` is relative to the worktree root, ``/``-separated, as ``git status`` prints it
    (a trailing ``/`` marks a directory). Returns True when any RUNTIME_ARTIFACTS pattern
    covers it, with gitignore semantics (case-sensitive).
    """
    return _covered(path, RUNTIME_ARTIFACTS)


def _covered(path: str, patterns: tuple[str, ...]) -> bool:
    """True when one of ``patterns`` covers ``path`` (see ``is_runtime_artifact``)."""
    is_dir = path.endswith("/")
    parts = [p for p in path.strip("/").split("/") if p and p != "."]
    if not parts:
        return False
    if is_dir:
        parts.append("")  # so directory-only patterns may match the directory itself
    return any(_matches(pattern, parts) for pattern in patterns)


TOOL_CACHES: tuple[str, ...] = (
    ".pytest_cache/", "__pycache__/", "*.pyc", ".mypy_cache/", ".ruff_cache/", ".tox/",
    ".nox/", ".hypothesis/", ".coverage", "node_modules/", ".next/", ".gradle/",
)
"""Gitignore-style patterns of the caches test runners, linters and package managers
write into a worktree: a project's ``.gitignore`` ignores them on purpose, so the commit
pipeline's warning about paths a tracked ignore rule ate leaves them out."""


def is_tool_cache(path: str) -> bool:
    """Tell whether a repo-relative posix path (``git status``'s form, a trailing ``/``
    for a directory) is, or lies inside, a tool's cache (``TOOL_CACHES``)."""
    return _covered(path, TOOL_CACHES)
