"""``fractal doctor``: gather a tree's facts (files, git, database) and hold them against
each other with the pure checks of ``domain/doctor.py``. It only reads: nothing is
created, migrated, healed or moved, so it also runs on a tree whose database is gone.

Like ``fractal init`` it takes a directory, not a Context: a Context reads the registry,
which may be the very thing that is broken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.doctor import Finding, NodeFacts, TreeFacts, diagnose
from fractal.domain.hosts import elsewhere
from fractal.domain.states import Status
from fractal.store.backend import this_host
from fractal.tree import Tree, locate

if TYPE_CHECKING:
    from fractal.store.rows import NodeRow

__all__ = ["Diagnosis", "doctor"]


@dataclass(frozen=True)
class Diagnosis:
    """The tree checked and what was found (empty: consistent)."""

    tree: Tree
    findings: tuple[Finding, ...]
    nodes: int


def doctor(cwd: Path) -> Diagnosis:
    """Check the tree ``cwd`` belongs to (see ``domain/doctor.py`` for the rules).
    Raises NotATree outside a tree and GitError when git cannot list its branches."""
    tree, _top = locate(cwd)
    facts = gather(tree)
    found = diagnose(facts)
    return Diagnosis(tree=tree, findings=tuple(found),
                     nodes=0 if facts.nodes is None else len(facts.nodes))


def gather(tree: Tree) -> TreeFacts:
    """The facts of ``tree``: the database (read only), the tree's branches and those of
    them naming no commit (one ``git for-each-ref``: git warns of a broken one), its worktree directories and each node's paths and supervisor."""
    from fractal.store.reader import inspect_database  # deferred: start-up cost (14 modules)
    from fractal.store.schema import HEAD_REVISION  # deferred: start-up cost (9 modules)
    from fractal.workspace import git  # deferred: start-up cost (16 modules)

    repo = tree.repo
    db_facts, rows = inspect_database(tree.db_path)
    db_facts = db_facts._replace(path=str(_relative(tree.db_path, repo)))
    listed = git.run_git(["for-each-ref", "--format=%(refname:short) %(objecttype)",
                          f"refs/heads/{tree.root}", f"refs/heads/{tree.root}.*"], repo)
    kinds = dict(line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line)
    broken = frozenset(
        [name for name, kind in kinds.items() if kind != "commit"]
        + [line.rsplit("refs/heads/", 1)[1] for line in listed.stderr.splitlines()
           if "ignoring broken ref refs/heads/" in line])
    branches = frozenset(name for name in kinds if name != tree.root) | frozenset(
        name for name in broken if name != tree.root)
    try:
        worktrees = frozenset(p.name for p in tree.worktrees_dir.iterdir()
                              if p.is_dir() and tree.owns(p.name) and p.name != tree.root)
    except OSError:
        worktrees = frozenset()
    nodes = None if rows is None else tuple(_node(tree, row, branches) for row in rows)
    return TreeFacts(root=tree.root, head_revision=HEAD_REVISION, db=db_facts, nodes=nodes,
                     branches=branches, worktrees=worktrees, broken=broken)


def _node(tree: Tree, row: NodeRow, branches: frozenset[str]) -> NodeFacts:
    from fractal.lifecycle.heal import crashed  # deferred: reads /proc, and tmux for an active node

    owner = elsewhere(row.host, this_host())
    if owner is not None:  # nothing of it is in this clone to check, nor its processes
        return NodeFacts(node=row.node, status=row.status.value, has_branch=False,
                         has_worktree=False, has_node_dir=False, elsewhere=owner)
    paths = tree.node(row.node)
    return NodeFacts(node=row.node, status=row.status.value, has_branch=row.node in branches,
                     has_worktree=(paths.worktree / ".git").exists(),
                     has_node_dir=paths.node_dir.is_dir(),
                     supervisor_gone=row.status is Status.ACTIVE and crashed(tree, row.node, row))


def _relative(path: Path, repo: Path) -> Path:
    try:
        return path.relative_to(repo)
    except ValueError:
        return path
