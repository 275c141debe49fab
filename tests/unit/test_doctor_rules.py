"""The pure rules behind ``fractal doctor`` (domain/doctor.py) and the missing-database
refusal (domain/dbmissing.py), table-driven."""

from __future__ import annotations

import pytest

from fractal.domain.dbmissing import missing_database_refusal
from fractal.domain.doctor import DbFacts, Finding, NodeFacts, TreeFacts, diagnose

DB = ".fractal/main/fractal.db"
SOUND = DbFacts(DB, exists=True, integrity=("ok",), revision="0015")


def facts(*nodes: NodeFacts, db: DbFacts = SOUND, branches: tuple[str, ...] | None = None,
          worktrees: tuple[str, ...] | None = None, registry: bool = True,
          broken: tuple[str, ...] = ()) -> TreeFacts:
    """A tree whose branches and worktrees are exactly its nodes' unless given."""
    names = tuple(n.node for n in nodes)
    return TreeFacts(root="main", head_revision="0015", db=db,
                     nodes=tuple(nodes) if registry else None,
                     branches=frozenset(names if branches is None else branches),
                     worktrees=frozenset(names if worktrees is None else worktrees),
                     broken=frozenset(broken))


def node(name: str = "main.a", status: str = "idle", *, elsewhere: str | None = None,
         **broken: bool) -> NodeFacts:
    parts = {"has_branch": True, "has_worktree": True, "has_node_dir": True, **broken}
    return NodeFacts(name, status, **parts, elsewhere=elsewhere)


@pytest.mark.parametrize(("tree", "expected"), [
    (facts(), []),
    (facts(node(), node("main.a.b", "retired", has_worktree=False, has_node_dir=False),
           worktrees=("main.a",)), []),
    (facts(node(has_branch=False), branches=()),
     [("main.a", "its branch main.a is gone")]),
    (facts(node(has_worktree=False, has_node_dir=False), worktrees=()),
     [("main.a", "its worktree .worktrees/main.a is gone")]),
    (facts(node(has_node_dir=False)),
     [("main.a", "its node dir .worktrees/main.a/.fractal/main.a is gone")]),
    (facts(node("main.a", "active", supervisor_gone=True)),
     [("main.a", "is recorded active but its supervisor is gone")]),
    (facts(node(), branches=("main.a", "main.x"), worktrees=("main.a", "main.x")),
     [("worktree .worktrees/main.x", "no registered node has it"),
      ("branch main.x", "no registered node has it")]),
    (facts(db=DbFacts(DB, exists=False), registry=False, branches=("main.a",)),
     [(f"database {DB}", "is missing")]),
    (facts(db=SOUND._replace(integrity=("row 3 missing from index",))),
     [(f"database {DB}", "fails its integrity check: row 3 missing from index")]),
    (facts(db=SOUND._replace(revision="0009")),
     [(f"database {DB}", "is at schema 0009, this fractal's is 0015")]),
    (facts(db=SOUND._replace(revision="0099")),
     [(f"database {DB}", "is at schema 0099, newer than this fractal's 0015")]),
    (facts(db=SOUND._replace(revision=None)),
     [(f"database {DB}", "has no schema stamp (not a fractal database?)")]),
    (facts(db=DbFacts(DB, exists=True, error="file is not a database"), registry=False),
     [(f"database {DB}", "cannot be read (file is not a database)")]),
    (facts(node(), broken=("main",)), [("branch main", "does not point at a commit")]),
    (facts(node(), branches=("main.a", "main.x"), worktrees=("main.a",),
           broken=("main.a", "main.x")),  # broken: named as such, not as unregistered
     [("branch main.a", "does not point at a commit"),
      ("branch main.x", "does not point at a commit")]),
    (facts(node("main.a", "active", elsewhere="build-07", has_branch=False,
                has_worktree=False, has_node_dir=False, supervisor_gone=True),
           branches=(), worktrees=()), []),  # another host's: checked there, not here
], ids=["clean", "retired-without-worktree", "branch-gone", "worktree-gone", "node-dir-gone",
        "supervisor-gone", "unregistered", "db-missing", "db-corrupt", "db-behind",
        "db-ahead", "db-unstamped", "db-unreadable", "root-branch-broken",
        "node-branch-broken", "another-hosts-node"])
def test_diagnose(tree: TreeFacts, expected: list[tuple[str, str]]) -> None:
    found = diagnose(tree)
    assert [(f.subject, f.problem) for f in found] == expected
    assert all(isinstance(f, Finding) and f.repair for f in found)


def test_every_repair_is_a_command_or_a_restore() -> None:
    broken = facts(node(has_branch=False, has_worktree=False), node("main.c", has_node_dir=False),
                   branches=("main.c", "main.x"), worktrees=("main.c", "main.y"))
    for finding in diagnose(broken):
        assert "`" in finding.repair, finding


@pytest.mark.parametrize(("traces", "creating", "refused", "says"), [
    ((), True, False, ""),
    ((), False, True, "only `fractal init` creates one"),
    (("worktree .worktrees/main.a",), True, True, "the tree's nodes are still there"),
    (("worktree .worktrees/main.a",), False, True, "worktree .worktrees/main.a"),
    (tuple(f"worktree .worktrees/main.n{i}" for i in range(5)), True, True, "and 2 more"),
], ids=["init-fresh", "other-command", "init-with-nodes", "command-with-nodes", "many"])
def test_missing_database_refusal(traces: tuple[str, ...], creating: bool, refused: bool,
                                  says: str) -> None:
    why = missing_database_refusal("/r/.fractal/main/fractal.db", "/r", traces,
                                   creating=creating)
    assert (why is not None) is refused
    if why is not None:
        assert says in why and "restore" in why.lower() and "fractal init" in why
