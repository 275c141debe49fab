"""When a tree's missing database may be created: the rule, over facts the store gathers.

A tree's history lives in one file, ``<repo>/.fractal/<root>/fractal.db``. Creating an
empty one where the tree already has nodes would silently drop their history and leave
them registered nowhere (their worktrees and branches still there, every verb on them
refused), so:

- only ``fractal init`` creates a tree's database, and only while nothing of the tree's
  nodes is left (no node worktree under ``.worktrees``, no leftover journal of an older
  database);
- any other command finding it missing is refused, naming the file and the recovery.

A database outside any tree (a path with no tree ``config.json`` beside it) is not a
tree's and is created on first use as before. A data dir removed whole (``config.json``
too) leaves no tree: ``fractal init`` starts a new one there, and ``fractal doctor``
lists the worktrees and branches the old one left.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["missing_database_refusal"]

SHOWN = 3  # traces a refusal names before "and N more"


def missing_database_refusal(db: str, repo: str, traces: Sequence[str], *,
                             creating: bool) -> str | None:
    """Why the missing tree database ``db`` must not be created now, or None when it may.

    ``repo`` is the repository holding the tree; ``traces`` describe what of the tree's
    nodes is still there (``worktree .worktrees/main.a``), empty for a fresh tree;
    ``creating`` is True for ``fractal init``, the only caller that may create it.
    """
    if traces:
        named = ", ".join(traces[:SHOWN])
        if len(traces) > SHOWN:
            named += f" and {len(traces) - SHOWN} more"
        return (f"the tree's database {db} is missing, but the tree's nodes are still there "
                f"({named}); an empty database would lose their history and leave them "
                f"unmanageable, so none was created. Put the file back (restore {db} from a "
                "backup or copy); or, to start the tree over without its history, remove "
                "each node's worktree and branch (`git worktree remove --force "
                ".worktrees/<node>`, `git branch -D <node>`; `fractal doctor` lists them) "
                f"and run `fractal init` in {repo}")
    if creating:
        return None
    return (f"the tree's database {db} is missing; nothing was created (only `fractal init` "
            f"creates one). Restore it from a backup, or run `fractal init` in {repo} to "
            "start an empty one (the tree's history is lost)")
