"""``fractal doctor``'s checks: a tree's files, branches, worktrees and database held
against each other, as pure rules over the facts the verb gathers.

Each finding names what is wrong and the exact command that repairs it; no finding means
the tree is consistent. The checks:

- the database: present, ``PRAGMA integrity_check`` answering ``ok``, its schema stamp
  the revision this fractal expects;
- every registered node has its branch; every one not retired its worktree (retiring
  removes it) and, in it, its node dir;
- every worktree under ``.worktrees`` named for the tree and every branch of the tree
  (``<root>.*``) belongs to a registered node;
- every branch of the tree (the root's too) points at a commit (an agent outside any
  sandbox, or a damaged repository, can leave one naming nothing, e.g. forty zeros);
- no node is recorded ``active`` while its supervisor is gone (a read heals that: the
  finding says which command).

A node another host owns (a shared PostgreSQL ledger) is not checked here: its branch,
worktree, node dir and supervisor live on that machine; ``fractal doctor`` there checks
them.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DbFacts", "Finding", "NodeFacts", "TreeFacts", "diagnose"]

RETIRED = "retired"
ACTIVE = "active"


class NodeFacts(NamedTuple):
    """One registered node as found on disk and in git."""

    node: str
    status: str
    has_branch: bool
    has_worktree: bool
    has_node_dir: bool
    supervisor_gone: bool = False
    """Recorded ``active`` and its supervisor is provably gone."""
    elsewhere: str | None = None
    """The host that owns it when that is another machine (None: this one)."""


class DbFacts(NamedTuple):
    """The tree database: ``exists``; ``integrity`` the rows of ``PRAGMA
    integrity_check`` (``("ok",)`` when sound; empty when it could not be read, with
    ``error`` saying why); ``revision`` the schema stamp (None: none)."""

    path: str
    exists: bool
    integrity: tuple[str, ...] = ()
    revision: str | None = None
    error: str = ""


class TreeFacts(NamedTuple):
    """Everything ``diagnose`` holds against each other. Paths are relative to the
    repository (``.worktrees/main.a``); ``branches`` and ``worktrees`` are the tree's own
    (names ``<root>.*``); ``nodes`` is None when the registry could not be read."""

    root: str
    head_revision: str
    db: DbFacts
    nodes: tuple[NodeFacts, ...] | None
    branches: frozenset[str]
    worktrees: frozenset[str]
    broken: frozenset[str] = frozenset()
    """The tree's branches (the root's included) that do not point at a commit."""


class Finding(NamedTuple):
    """One inconsistency: ``subject`` (a node, branch, worktree or the database), what
    is wrong with it, and the command that repairs it."""

    subject: str
    problem: str
    repair: str


def diagnose(facts: TreeFacts) -> list[Finding]:
    """Every finding of ``facts``: the database's, each node's, then the unregistered
    worktrees (removed before their branches can be) and branches."""
    found = _database(facts)
    for branch in sorted(facts.broken):
        found.append(Finding(f"branch {branch}", "does not point at a commit",
                             f"`git reflog show refs/heads/{branch}` lists where it was; "
                             f"`git update-ref --no-deref refs/heads/{branch} SHA` sets it "
                             "back"))
    nodes = facts.nodes
    if nodes is None:
        return found
    registered = {n.node for n in nodes}
    for node in nodes:
        found += _node(node)
    for name in sorted(facts.worktrees - registered):  # first: a checked-out branch stays
        found.append(Finding(f"worktree .worktrees/{name}", "no registered node has it",
                             f"`git worktree remove --force .worktrees/{name}`"))
    for branch in sorted(facts.branches - registered - facts.broken):
        found.append(Finding(f"branch {branch}", "no registered node has it",
                             f"`git branch -D {branch}`"))
    return found


def _database(facts: TreeFacts) -> list[Finding]:
    db = facts.db
    subject = f"database {db.path}"
    if not db.exists:
        return [Finding(subject, "is missing", f"restore {db.path} from a backup; to start "
                        "the tree over without its history, remove the worktrees and "
                        "branches listed below, then `fractal init`")]
    if not db.integrity:
        return [Finding(subject, f"cannot be read ({db.error or 'no answer'})",
                        f"check the file's permissions, or restore {db.path} from a backup")]
    found: list[Finding] = []
    if db.integrity != ("ok",):
        shown = "; ".join(db.integrity[:3]) + (" ..." if len(db.integrity) > 3 else "")
        found.append(Finding(subject, f"fails its integrity check: {shown}",
                             f"restore {db.path} from a backup, or salvage it: `sqlite3 "
                             f"{db.path} .recover | sqlite3 recovered.db`, then move "
                             "recovered.db in its place while no node runs"))
    if db.revision is None:
        found.append(Finding(subject, "has no schema stamp (not a fractal database?)",
                             f"restore {db.path} from a backup"))
    elif db.revision < facts.head_revision:
        found.append(Finding(subject, f"is at schema {db.revision}, this fractal's is "
                             f"{facts.head_revision}", "`fractal node list` (any command "
                             "that reads the tree upgrades it)"))
    elif db.revision > facts.head_revision:
        found.append(Finding(subject, f"is at schema {db.revision}, newer than this "
                             f"fractal's {facts.head_revision}",
                             "upgrade fractal (`pip install -U fractal`)"))
    return found


def _node(node: NodeFacts) -> list[Finding]:
    name = node.node
    found: list[Finding] = []
    if node.elsewhere is not None:
        return found  # its files and processes are on that machine
    if not node.has_branch:
        found.append(Finding(name, f"its branch {name} is gone",
                             f"`fractal node delete {name}` deregisters it"))
    if node.status != RETIRED and not node.has_worktree:
        repair = (f"`git worktree add .worktrees/{name} {name}` brings it back, or "
                  f"`fractal node delete {name}` deregisters the node") if node.has_branch \
            else f"`fractal node delete {name}` deregisters it"
        found.append(Finding(name, f"its worktree .worktrees/{name} is gone", repair))
    elif node.status != RETIRED and not node.has_node_dir:
        found.append(Finding(name, f"its node dir .worktrees/{name}/.fractal/{name} is gone",
                             f"`git -C .worktrees/{name} checkout HEAD -- .fractal/{name}`"))
    if node.supervisor_gone:
        found.append(Finding(name, "is recorded active but its supervisor is gone",
                             f"`fractal node status {name}` (the read parks its run), then "
                             f"`fractal node resume {name}`"))
    return found
