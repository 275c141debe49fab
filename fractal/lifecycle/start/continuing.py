"""``fractal node start --continue``: re-arm a settled node's worktree (docs/lifecycle.md).

Operator edits under the node dir are committed (config.json edits included, so they
survive), then the rest of the worktree is restored clean. Uncommitted project files
are refused, listed, unless ``--clean`` discards them, after saving them on a rescue ref
(``fractal rescue list`` shows it; ``fractal rescue restore`` brings them back).
"""

from __future__ import annotations

from fractal.errors import FractalError
from fractal.tree import NodePaths
from fractal.workspace import git
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.conflict_guard import operation_in_progress
from fractal.workspace.handback import read_note

MAX_LISTED = 20


def prepare_continue(paths: NodePaths, *, clean: bool, actor: str = "operator") -> str | None:
    """Commit node-dir edits, then refuse (or, with ``clean``, discard) other changes.

    A worktree holding a conflict handed back by ``node merge --hand-back`` (its note in
    the node dir, a merge in progress) is left exactly as it is: resolving it is the run's
    job. Before ``clean`` discards anything, the files are saved on a rescue ref (booked
    with ``actor``); returns that ref, or None when nothing was discarded. Raises
    FractalError listing the uncommitted project files.
    """
    worktree = paths.worktree
    if read_note(paths.node_dir) is not None and operation_in_progress(worktree) is not None:
        return None
    node_rel = f".fractal/{paths.branch}/"
    changed = git.changed_paths(worktree)
    outside = sorted(p for p in changed if not p.startswith(node_rel))
    if outside and not clean:
        shown = "\n  ".join(outside[:MAX_LISTED])
        more = f"\n  ... and {len(outside) - MAX_LISTED} more" if len(outside) > MAX_LISTED else ""
        raise FractalError(f"{worktree} has uncommitted project files; commit them, or pass "
                           f"--clean to discard them:\n  {shown}{more}")
    if any(p.startswith(node_rel) for p in changed):
        backstop_commit(worktree, subject=f"{paths.branch}: operator edits (committed at "
                        "continue)", paths=[node_rel])
    if not outside:
        return None
    from fractal.domain.cleanup import Cleanup  # deferred: start-up cost (3 modules)
    from fractal.lifecycle.rescuing import rescue_node  # deferred: start-up cost (4 modules)

    saved = rescue_node(paths.tree, paths.branch, Cleanup.CONTINUE_CLEAN.value, actor=actor,
                        worktree=worktree)
    # deferred: start-up cost (only --clean discards)
    from fractal.workspace.nodelinks import drop_node_links

    drop_node_links(worktree)  # a link under .fractal/ is never checked out again
    git.run_git(["checkout", "--", "."], worktree)
    git.run_git(["clean", "-fd", "--", "."], worktree)
    return saved.ref
