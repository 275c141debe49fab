"""Rescues as a verb: write a node's rescue ref and book it, list them, restore one.

``rescue_node`` is what every destructive path calls first (``node delete --force``,
``reset``, ``destroy``, ``start --continue --clean``, a merge's restore, ``retire
--force``): it saves the branch tip plus the worktree's unsaved files on a rescue ref
(``fractal.workspace.rescue``), then books a ``rescues`` row and a ``rescue`` event. The
ref is written before the row, so a crash in between leaves a ref without a row (still
listed, by ``fractal rescue list``), never a row without a ref.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.errors import FractalError, GitError, NotATree
from fractal.lifecycle.adopting import take_objects
from fractal.store.backend import ledger_exists
from fractal.tree import Tree, find_tree
from fractal.workspace.git import head_sha, show_file
from fractal.workspace.rescue import (
    RESCUE_PREFIX,
    Rescue,
    files_of,
    list_rescue_refs,
    operation_of,
    rescue,
    rescue_branch,
    restore_branch,
    stamp_iso,
)

__all__ = ["RescueListing", "Restored", "list_rescues", "record_rescue", "rescue_node",
           "restore_rescue"]


@dataclass(frozen=True)
class RescueListing:
    """One rescue ref as ``fractal rescue list`` shows it.

    ``operation``, ``files`` (count) and ``created_at`` (ISO-8601 UTC) come from the
    ``rescues`` row; without one (the database was destroyed, or the row was never
    booked) they are read from the ref itself: its commit's subject and body and its
    stamp (None where those do not say).
    """

    ref: str
    sha: str
    node: str
    stamp: str
    operation: str | None
    files: int | None
    created_at: str | None


@dataclass(frozen=True)
class Restored:
    """What ``fractal rescue restore`` made: a branch at the rescue commit, and the node
    registered from it when ``--as`` was given (None otherwise)."""

    ref: str
    sha: str
    branch: str
    node: str | None
    reset: tuple[str, ...] = ()
    """What a restored node could not take over from the rescued one (one line each)."""


def record_rescue(tree: Tree, saved: Rescue, *, actor: str) -> int:
    """Book ``saved`` in the tree's database: a ``rescues`` row and a completed ``rescue``
    event on the node (metadata: the ref). Returns the rescue_id. Raises StoreError."""
    from fractal.store.ledger import Ledger  # deferred: start-up cost (25 modules)
    from fractal.store.rescues import RescueBook  # deferred: start-up cost (17 modules)
    from fractal.store.timefmt import format_ts  # deferred: start-up cost (2 modules)

    rescue_id = RescueBook(tree.db_path).record_rescue(
        node=saved.branch, operation=saved.operation, ref=saved.ref, sha=saved.sha,
        tip=saved.tip, files=saved.files, actor=actor, created_at=format_ts(saved.instant))
    Ledger(tree.db_path).add_event(saved.branch, "rescue", actor=actor, status="completed",
                                   metadata=f"{saved.operation}: {saved.ref} "
                                            f"({len(saved.files)} file(s))")
    return rescue_id


def rescue_node(tree: Tree, branch: str, operation: str, *, actor: str,
                worktree: Path | None = None, branch_gone: bool = False) -> Rescue:
    """Write and book the rescue ref of ``branch`` before ``operation`` destroys anything.

    The worktree saved is ``worktree`` when given, else the node's own (the main checkout
    for the root); when it no longer exists, the branch tip alone is saved. With
    ``branch_gone`` (a missing node whose branch was renamed or deleted away) the
    worktree's files are saved on top of whatever it has checked out (its ``HEAD``).
    The node's private git objects are adopted first (``lifecycle.adopting``: the
    rescue's git reads the shared store alone). Raises GitError when there is nothing to
    build the rescue on (no branch and no worktree with a commit checked out),
    FractalError when the branch needs objects adoption refused, StoreError when the row
    cannot be booked (the ref is written already).
    """
    taken = take_objects(tree, branch, None, operation, always_check=False)
    if taken.refusal:  # a rescue ref to objects adoption has not checked is never written
        raise FractalError(f"cannot rescue {branch} before {operation}, so nothing was "
                           f"removed: {taken.refusal}")
    checkout = worktree if worktree is not None else tree.worktree_of(branch)
    if checkout.is_dir():
        saved = rescue(checkout, branch, operation, tip_ref="HEAD" if branch_gone else None)
    else:
        saved = rescue_branch(tree.repo, branch, operation)
    record_rescue(tree, saved, actor=actor)
    return saved


def _repo(cwd: Path) -> tuple[Path, Tree | None]:
    """The repository of ``cwd`` and its tree, None when there is none (any more: rescue
    refs outlive ``fractal destroy``). Raises GitError outside a repository."""
    from fractal.workspace.discovery import checkout_and_main  # deferred: start-up cost (1 module)

    try:
        tree = find_tree(cwd)
    except NotATree:
        return checkout_and_main(cwd)[1], None
    return tree.repo, tree


def list_rescues(cwd: Path) -> list[RescueListing]:
    """Every rescue ref of the repository, oldest first, with its booked row when the
    tree's database still has one (after ``destroy`` there is none, and the refs are
    listed alone). Raises GitError."""
    from fractal.store.rescues import RescueBook  # deferred: start-up cost (17 modules)

    repo, tree = _repo(cwd)
    rows = {r.ref: r for r in RescueBook(tree.db_path).rescues()} \
        if tree is not None and ledger_exists(tree.db_path) else {}
    out: list[RescueListing] = []
    for ref in list_rescue_refs(repo):
        row = rows.get(ref.ref)
        out.append(RescueListing(
            ref=ref.ref, sha=ref.sha, node=ref.branch, stamp=ref.stamp,
            operation=row.operation if row else operation_of(ref.subject),
            files=len(row.files) if row else files_of(ref.body),
            created_at=row.created_at if row else stamp_iso(ref.stamp)))
    return out


def _rescued_settings(repo: Path, sha: str, ref: str) -> tuple[dict[str, object],
                                                                tuple[str, ...]]:
    """The rescued node's config.json as settings for the node restored from ``sha``, and
    a line per thing that could not be kept (its default applies)."""
    import json  # deferred: start-up cost (json: 5 modules)

    from fractal.domain.nodeinit import restored_settings  # deferred: start-up cost (17 modules)

    rescued = ref[len(RESCUE_PREFIX):].rsplit("/", 1)[0]
    path = f".fractal/{rescued}/config.json"
    text = show_file(repo, sha, path)
    if text is None:
        return {}, (f"the rescue commit holds no {path}: every config key is a default",)
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        return {}, (f"{path} in the rescue commit is not a JSON object: every config key "
                    "is a default",)
    settings, reset = restored_settings(raw)
    return settings, tuple(f"config key {key} ({json.dumps(raw.get(key))}) is invalid here: "
                           "reset to its default" for key in reset)


def restore_rescue(cwd: Path, ref: str, *, as_name: str | None = None,
                   branch: str | None = None) -> Restored:
    """Make a branch from the rescue ``ref``, and with ``as_name`` a fresh node from it.

    Without ``as_name`` the branch is ``branch`` or ``rescued/<node>/<stamp>`` (outside
    the tree's dotted names, so no node claims it). With ``as_name``, a node
    ``<caller>.<as_name>`` is spawned like ``fractal node init`` but forked from the rescue
    commit (its node directory kept when the rescued node had the same branch name), and
    the branch is the node's; it keeps the rescued node's title (from its config in the
    rescue commit). Raises FractalError when the ref is unknown or the branch
    exists, and whatever ``node init`` raises.
    """
    repo, _tree = _repo(cwd)
    full = ref if ref.startswith(RESCUE_PREFIX) else RESCUE_PREFIX + ref
    if as_name is not None:
        tree = find_tree(cwd)  # a node needs a tree
        from fractal.lifecycle.spawn import init_node  # deferred: start-up cost (74 modules)

        try:
            sha = head_sha(tree.repo, full)
        except GitError:
            raise FractalError(f"no rescue ref {full}; list them with "
                               "`fractal rescue list`") from None
        from fractal.lifecycle.context import open_context  # deferred: start-up cost (8 modules)

        settings, reset = _rescued_settings(tree.repo, sha, full)
        made = init_node(open_context(cwd), as_name, settings, start_point=sha)
        return Restored(ref=full, sha=sha, branch=made.paths.branch, node=made.paths.branch,
                        reset=reset)
    rest = full[len(RESCUE_PREFIX):]
    name = branch or f"rescued/{rest}"
    sha = restore_branch(repo, full, name)
    return Restored(ref=full, sha=sha, branch=name, node=None)
