"""What the cleanup verbs share: the node a name names, its facts, its subtree, its target.

``retire``, ``delete``, ``reset`` and ``destroy`` (``fractal.lifecycle.cleanup.retire``,
``.delete``, ``.teardown``) gather ``NodeFacts`` here and hand them to the pure rules of
``fractal.domain.cleanup``; who may act is the context's (``Context.authorize``), and
every refusal is recorded as a ``failed`` event on the node it names
(``Context.refuse``), with the rule as its metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

from fractal import tmux
from fractal.domain.cleanup import NodeFacts, is_missing
from fractal.domain.states import Status
from fractal.errors import FractalError, GitError
from fractal.lifecycle.context import Context, Refused
from fractal.lifecycle.heal import heal_if_crashed
from fractal.store.ledger import Ledger
from fractal.store.rows import NodeRow
from fractal.tree import Tree, parent_of, resolve_node
from fractal.workspace import git

__all__ = ["facts_of", "inside", "node_named", "refuse_if_gone", "subtree_rows", "target_of"]


def node_named(ctx: Context, name: str) -> str:
    """The registered branch ``name`` names. Raises NodeNotFound; Refused for the root
    (the root is not a node: ``fractal reset``/``destroy`` act on the tree)."""
    branch = resolve_node(name, [*ctx.known(), ctx.tree.root], ctx.tree,
                          near=lambda: ctx.loop_near)
    if branch == ctx.tree.root:
        raise Refused(f"{branch} is the tree's root, not a node; `fractal reset` removes "
                      "every node, `fractal destroy` the tree")
    return branch


def subtree_rows(ledger: Ledger, branch: str) -> list[NodeRow]:
    """``branch``'s registry row and its registered descendants', shallowest first."""
    rows = [r for r in ledger.nodes() if r.node == branch or r.node.startswith(branch + ".")]
    return sorted(rows, key=lambda r: (r.node.count("."), r.node))


def target_of(tree: Tree, row: NodeRow) -> str:
    """Where ``row``'s work merges: its config's ``base`` when set, else its parent's branch
    (the root for a top-level node). The config is read from the worktree, or from the
    branch's committed copy when the worktree is gone; a target branch that no longer
    exists falls back to the root."""
    base = _config_base(tree, row.node)
    parent = row.parent or parent_of(row.node) or tree.root
    for candidate in (base, parent):
        if candidate and git.branch_exists(tree.repo, candidate):
            return candidate
    return tree.root


def _config_base(tree: Tree, branch: str) -> str | None:
    paths = tree.node(branch)
    text: str | None = None
    try:
        text = paths.config_path.read_text(encoding="utf-8")
    except OSError:
        proc = git.run_git(["show", f"refs/heads/{branch}:.fractal/{branch}/config.json"],
                           tree.repo, check=False)
        text = proc.stdout if proc.returncode == 0 else None
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    base = data.get("base") if isinstance(data, dict) else None
    return base if isinstance(base, str) and base else None


def _booting(row: NodeRow) -> bool:
    """An ``idle`` node with a tmux session that is alive, or cannot be told gone."""
    if row.status != Status.IDLE.value or not row.tmux_session:
        return False
    socket = Path(row.tmux_socket) if row.tmux_socket else tmux.socket_path()
    return tmux.probe(row.tmux_session, socket) is not tmux.Liveness.GONE


def facts_of(tree: Tree, row: NodeRow, *, with_unmerged: bool = False) -> NodeFacts:
    """Gather ``row``'s facts (healing it first when it crashed): its status, whether its
    worktree and branch exist, whether it is booting, its unsaved files, and with
    ``with_unmerged`` its target and the commits the target lacks."""
    if row.status == Status.ACTIVE.value and heal_if_crashed(tree, row.node):
        fresh = Ledger(tree.db_path).node(row.node)
        row = fresh if fresh is not None else row
    worktree = tree.worktree_of(row.node)
    has_worktree = (worktree / ".git").exists()
    has_branch = git.branch_exists(tree.repo, row.node)
    dirty: tuple[str, ...] = ()
    if has_worktree:
        try:
            dirty = tuple(git.changed_paths(worktree))
        except GitError:  # a broken checkout: treat as missing rather than guess its files
            has_worktree = False
    target = target_of(tree, row) if with_unmerged else ""
    # The merge machinery loads only for the verbs that weigh unmerged work (retire,
    # delete); `node start` reaches this module for refuse_if_gone alone.
    from fractal.lifecycle.merge.target import landed_merge  # deferred: start-up cost (3 modules)
    from fractal.workspace.teardown import unmerged_commits  # deferred: start-up cost (23 modules)

    unmerged = unmerged_commits(tree.repo, row.node, target,
                                landed_merge(tree, row.node, target)) \
        if with_unmerged and has_branch else ()
    return NodeFacts(branch=row.node, status=row.status, worktree_exists=has_worktree,
                     branch_exists=has_branch, booting=_booting(row), dirty=dirty,
                     unmerged=unmerged, target=target)


def inside(cwd: Path, worktree: Path) -> bool:
    """True when ``cwd`` lies in ``worktree`` (removing it would pull the floor away)."""
    try:
        cwd.resolve().relative_to(worktree.resolve())
    except ValueError:
        return False
    return True


def refuse_if_gone(tree: Tree, row: NodeRow | None, verb: str) -> None:
    """Raise FractalError when ``row``'s node cannot ``verb`` because it is retired or its
    worktree or branch vanished, naming the fix (``unretire``, ``delete``), before any
    reader trips over its missing ``config.json``."""

    if row is None:
        return
    if row.status == Status.RETIRED.value:
        raise FractalError(f"node {row.node} is retired; `fractal node unretire {row.node}` "
                           f"brings its worktree back before you {verb} it")
    facts = NodeFacts(branch=row.node, status=row.status,
                      worktree_exists=(tree.worktree_of(row.node) / ".git").exists(),
                      branch_exists=git.branch_exists(tree.repo, row.node))
    if is_missing(facts):
        gone = "branch" if not facts.branch_exists else "worktree"
        raise FractalError(f"node {row.node} is missing: its {gone} is gone, so it cannot "
                           f"{verb}; `fractal node delete {row.node}` deregisters it")
