"""retire/unretire/delete/reset/destroy and the missing read, on real git and SQLite.

No tmux: live nodes are registry rows set ``active``/``paused`` with no supervisor, which
heal leaves alone (nothing proves them gone).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from fractal.errors import FractalError
from fractal.lifecycle.cleanup.delete import delete
from fractal.lifecycle.cleanup.retire import retire, unretire
from fractal.lifecycle.cleanup.teardown import destroy, reset
from fractal.lifecycle.context import open_context
from fractal.lifecycle.reads.nodes import list_nodes, node_status
from fractal.lifecycle.rescuing import list_rescues, restore_rescue
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.start.continuing import prepare_continue
from fractal.lifecycle.start.node import start_node
from fractal.lifecycle.steering.signal import Refused
from fractal.lifecycle.trees import init_tree
from fractal.store.ledger import Ledger
from fractal.tree import Tree, trees_in
from fractal.workspace.rescue import list_rescue_refs
from tests.helpers import copy_of_tree, git, make_repo


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo)
    for name, parent in (("a", None), ("b", "a"), ("c", None)):
        init_node(open_context(repo), name, {}, parent=parent)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    """A tree rooted at ``main`` with nodes ``main.a``, ``main.a.b`` and ``main.c``, built
    by the verbs once per test process and copied for each test."""
    return Tree(repo=copy_of_tree(tmp_path / "repo", "cleanup-a-b-c", _build), root="main")


def _events(tree: Tree, node: str, event: str) -> list[tuple[str, str, str]]:
    with sqlite3.connect(tree.db_path) as conn:
        return conn.execute("SELECT status, actor, metadata FROM events WHERE node = ? AND "
                            "event = ? ORDER BY event_id", (node, event)).fetchall()


def force_status(tree: Tree, node: str, status: str) -> None:
    """Test setup only: put a node in ``status`` directly (no loop runs in these tests)."""
    with sqlite3.connect(tree.db_path) as conn:
        conn.execute("UPDATE nodes SET status = ? WHERE node = ?", (status, node))


def _status(tree: Tree, node: str) -> str | None:
    row = Ledger(tree.db_path).node(node)
    return None if row is None else row.status


def _commit(worktree: Path, name: str, text: str = "work\n") -> None:
    (worktree / name).write_text(text)
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-m", f"add {name}")


# ---- retire / unretire --------------------------------------------------------------


def test_retire_hides_the_subtree_and_unretire_restores_each_status(tree: Tree) -> None:
    force_status(tree, "main.a", "completed")
    force_status(tree, "main.a.b", "stopped")
    done = retire(open_context(tree.repo), "a", reason="shipped")
    assert [(r.branch, r.before) for r in done] == [("main.a.b", "stopped"),
                                                    ("main.a", "completed")]
    for node in ("main.a", "main.a.b"):
        assert _status(tree, node) == "retired"
        assert not tree.worktree_of(node).exists()
        assert git(tree.repo, "rev-parse", "--verify", node)  # the branch stays
    assert _events(tree, "main.a", "retire") == [("completed", "operator",
                                                  "was completed: shipped")]
    assert [r["node"] for r in list_nodes(open_context(tree.repo), None)] == ["main.c"]
    assert [r["node"] for r in list_nodes(open_context(tree.repo), None, show="retired")] == [
        "main.a", "main.a.b"]
    assert {r["node"]: r["status"] for r in list_nodes(open_context(tree.repo), None, show="all")} == {
        "main.a": "retired", "main.a.b": "retired", "main.c": "idle"}
    assert node_status(open_context(tree.repo), "a").line == "retired (was completed: shipped)"
    with pytest.raises(FractalError, match="unretire"):
        start_node(open_context(tree.repo), "a", continue_mode=True)

    back = unretire(open_context(tree.repo), "a")
    assert [(r.branch, r.after) for r in back] == [("main.a", "completed"),
                                                   ("main.a.b", "stopped")]
    assert (tree.worktree_of("main.a") / ".fractal" / "main.a" / "config.json").is_file()
    assert git(tree.worktree_of("main.a"), "config", "--worktree", "user.name") == "main.a"
    assert _events(tree, "main.a", "unretire")[-1][2] == "restored completed"


@pytest.mark.parametrize("status", ["active", "paused"])
def test_retire_refuses_a_live_node_anywhere_in_the_subtree(tree: Tree, status: str) -> None:
    force_status(tree, "main.a.b", status)
    with pytest.raises(Refused, match=rf"main\.a\.b is {status}"):
        retire(open_context(tree.repo), "a")
    assert _status(tree, "main.a") == "idle" and tree.worktree_of("main.a").is_dir()
    assert _events(tree, "main.a.b", "retire")[0][0] == "failed"


def test_retire_of_a_dirty_worktree_needs_force_and_rescues_first(tree: Tree) -> None:
    wt = tree.worktree_of("main.c")
    (wt / "notes with space.txt").write_text("unsaved\n")
    with pytest.raises(Refused, match="uncommitted files"):
        retire(open_context(tree.repo), "c")
    assert wt.is_dir()
    [done] = retire(open_context(tree.repo), "c", force=True)
    assert done.rescue_ref is not None
    assert git(tree.repo, "show", f"{done.rescue_ref}:notes with space.txt") == "unsaved"
    with pytest.raises(Refused, match="already retired"):
        retire(open_context(tree.repo), "c")


# ---- delete -------------------------------------------------------------------------


def test_delete_refuses_unmerged_work_listing_it_then_force_rescues(tree: Tree) -> None:
    _commit(tree.worktree_of("main.a"), "feature.txt")
    (tree.worktree_of("main.a.b") / "scratch.txt").write_text("unsaved\n")
    with pytest.raises(Refused) as refused:
        delete(open_context(tree.repo), "a")
    text = str(refused.value)
    assert "add feature.txt" in text and "not merged into main" in text
    assert "scratch.txt" in text and "--force" in text
    assert _status(tree, "main.a") == "idle"

    done = delete(open_context(tree.repo), "a", force=True)
    assert [d.branch for d in done] == ["main.a.b", "main.a"]
    for node in ("main.a", "main.a.b"):
        assert _status(tree, node) is None
        assert not tree.worktree_of(node).exists()
        assert git(tree.repo, "branch", "--list", node) == ""
    refs = {r.branch: r.ref for r in list_rescue_refs(tree.repo)}
    assert git(tree.repo, "show", f"{refs['main.a']}:feature.txt") == "work"
    assert git(tree.repo, "show", f"{refs['main.a.b']}:scratch.txt") == "unsaved"
    assert _events(tree, "main.a", "init")  # history stays
    assert _events(tree, "main.a", "delete")[-1][0] == "completed"


def test_a_squash_merged_branch_deletes_without_force(tree: Tree) -> None:
    wt = tree.worktree_of("main.c")
    _commit(wt, "done.txt")
    git(tree.repo, "merge", "-q", "--squash", "main.c")
    git(tree.repo, "reset", "-q", "--", ".fractal")  # node directories never land
    git(tree.repo, "commit", "-q", "-m", "main: merge main.c")
    git(tree.repo, "clean", "-fdq", "--", ".fractal/main.c")
    [done] = delete(open_context(tree.repo), "c")
    assert done.rescue_ref is not None and not done.missing


def test_delete_refuses_a_live_node_even_with_force(tree: Tree) -> None:
    force_status(tree, "main.a.b", "paused")
    with pytest.raises(Refused, match=r"main\.a\.b is paused"):
        delete(open_context(tree.repo), "a", force=True)
    assert _status(tree, "main.a.b") == "paused" and tree.worktree_of("main.a.b").is_dir()


def test_a_deleted_name_is_used_again_with_fresh_seeds(tree: Tree) -> None:
    wt = tree.worktree_of("main.c")
    node_md = wt / ".fractal" / "main.c" / "NODE.md"
    node_md.write_text("# The old task\n")
    git(wt, "commit", "-qam", "old task")
    git(tree.repo, "merge", "-q", "--no-edit", "main.c")  # a plain merge carries the node dir
    delete(open_context(tree.repo), "c", force=True)
    made = init_node(open_context(tree.repo), "c", {})
    assert made.paths.branch == "main.c"
    assert "The old task" not in made.paths.node_md.read_text()
    assert _status(tree, "main.c") == "idle"
    assert git(made.paths.worktree, "status", "--porcelain") == ""


def test_rescue_restore_as_a_fresh_node(tree: Tree) -> None:
    wt = tree.worktree_of("main.c")
    (wt / "unsaved.txt").write_text("keep me\n")
    [done] = delete(open_context(tree.repo), "c", force=True)
    assert done.rescue_ref is not None
    restored = restore_rescue(tree.repo, done.rescue_ref, as_name="c")
    assert restored.node == "main.c"
    assert (tree.worktree_of("main.c") / "unsaved.txt").read_text() == "keep me\n"
    plain = restore_rescue(tree.repo, done.rescue_ref)
    assert plain.branch.startswith("rescued/main.c/") and plain.node is None
    assert [r.operation for r in list_rescues(tree.repo)] == ["delete"]


def test_rescue_restore_as_keeps_the_rescued_config_and_title(tree: Tree) -> None:
    import json

    init_node(open_context(tree.repo), "d", {"title": "the parser", "agent": "command:true",
                                             "max_iters": 3, "sync": False})
    config = tree.node("main.d").config_path
    raw = json.loads(config.read_text())
    raw["iter_timeout"] = "not a duration"  # hand-edited, then committed
    config.write_text(json.dumps(raw))
    git(tree.worktree_of("main.d"), "commit", "-qam", "edit config")
    [done] = delete(open_context(tree.repo), "d", force=True)
    assert done.rescue_ref is not None
    restored = restore_rescue(tree.repo, done.rescue_ref, as_name="e")
    kept = json.loads(tree.node("main.e").config_path.read_text())
    assert (kept["title"], kept["agent"], kept["max_iters"], kept["sync"]) == (
        "the parser", "command:true", 3, False)
    assert (kept["parent"], kept["iter_timeout"]) == ("main", None)
    assert [line.split(" (")[0] for line in restored.reset] == ["config key iter_timeout"]
    row = Ledger(tree.db_path).node("main.e")
    assert row is not None and row.title == "the parser"


# ---- authorisation ------------------------------------------------------------------


def test_inside_a_loop_a_node_acts_on_its_descendants_only(
        tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    a = tree.node("main.a")
    monkeypatch.setenv("_NODE", str(a.node_dir))
    for verb in (lambda n: delete(open_context(a.worktree), n), lambda n: retire(open_context(a.worktree), n)):
        for target in ("c", "main.a"):
            with pytest.raises(Refused, match="only the operator"):
                verb(target)
    assert _events(tree, "main.c", "delete")[0][:2] == ("failed", "main.a")
    assert _events(tree, "main.c", "retire")[0][0] == "failed"
    with pytest.raises(Refused, match="only the operator at the root"):
        reset(open_context(a.worktree))
    [done] = delete(open_context(a.worktree), "main.a.b")
    assert done.branch == "main.a.b"
    assert _events(tree, "main.a.b", "delete")[-1][:2] == ("completed", "main.a")


# ---- missing ------------------------------------------------------------------------


def test_a_vanished_worktree_reads_missing_with_the_fix(tree: Tree) -> None:
    shutil.rmtree(tree.worktree_of("main.c"))
    status = node_status(open_context(tree.repo), "c")
    assert status.status == "missing"
    assert "fractal node delete main.c" in status.detail
    row = next(r for r in list_nodes(open_context(tree.repo), None) if r["node"] == "main.c")
    assert row["status"] == "missing"
    assert _status(tree, "main.c") == "missing"  # a VANISH move, recorded once
    assert _events(tree, "main.c", "orphan") == [
        ("completed", None, "was idle: its worktree is gone")]
    with pytest.raises(FractalError, match="is missing") as refused:
        start_node(open_context(tree.repo), "c")
    assert "config.json" not in str(refused.value)
    [done] = delete(open_context(tree.repo), "c")
    assert done.missing and _status(tree, "main.c") is None


def test_a_vanished_branch_reads_missing(tree: Tree) -> None:
    shutil.rmtree(tree.worktree_of("main.c"))
    git(tree.repo, "worktree", "prune")
    git(tree.repo, "branch", "-D", "main.c")
    assert node_status(open_context(tree.repo), "c").detail.startswith("its branch is gone")
    [done] = delete(open_context(tree.repo), "c")
    assert done.rescue_ref is None


# ---- reset / destroy / continue --clean ---------------------------------------------


def test_reset_refuses_while_live_then_removes_every_node(tree: Tree) -> None:
    force_status(tree, "main.c", "active")
    with pytest.raises(Refused, match=r"main.c \(active\)"):
        reset(open_context(tree.repo))
    force_status(tree, "main.c", "exited")
    done = reset(open_context(tree.repo))
    assert [d.branch for d in done.nodes] == ["main.a.b", "main.a", "main.c"]
    assert Ledger(tree.db_path).nodes() == []
    assert git(tree.repo, "branch", "--format=%(refname:short)") == "main"
    assert {r.branch for r in list_rescue_refs(tree.repo)} == {"main.a", "main.a.b", "main.c"}
    assert _events(tree, "main.a", "init")  # the database history stays
    assert _events(tree, "main", "reset")[-1][0] == "completed"


def test_destroy_is_the_inverse_of_init(tree: Tree) -> None:
    (tree.worktree_of("main.a") / "unsaved.txt").write_text("x\n")
    done = destroy(open_context(tree.repo))
    assert len(done.nodes) == 3
    assert not tree.data_dir.exists() and not (tree.repo / ".worktrees").exists()
    refs = {r.branch: r.ref for r in list_rescue_refs(tree.repo)}
    assert git(tree.repo, "show", f"{refs['main.a']}:unsaved.txt") == "x"
    assert (tree.repo / "README.md").is_file()
    assert "fractal" not in (tree.repo / ".git" / "info" / "exclude").read_text()
    assert {r.node for r in list_rescues(tree.repo)} == {"main.a", "main.a.b", "main.c"}
    listed = {r.node: r for r in list_rescues(tree.repo)}  # no rows any more: read the refs
    assert {r.operation for r in listed.values()} == {"destroy"}
    assert listed["main.a"].files == 1 and listed["main.c"].files == 0
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(r.created_at))
               for r in listed.values())
    back = restore_rescue(tree.repo, refs["main.a"])  # no tree needed for a branch
    assert git(tree.repo, "show", f"{back.branch}:unsaved.txt") == "x"
    init_tree(tree.repo)  # and the tree can be made again
    assert init_node(open_context(tree.repo), "a", {}).paths.branch == "main.a"


def test_continue_clean_writes_a_rescue_ref_before_it_cleans(tree: Tree) -> None:
    paths = tree.node("main.c")
    (paths.worktree / "draft.txt").write_text("unsaved\n")
    (paths.worktree / "README.md").write_text("edited\n")
    with pytest.raises(FractalError, match="--clean"):
        prepare_continue(paths, clean=False)
    ref = prepare_continue(paths, clean=True)
    assert ref is not None
    assert not (paths.worktree / "draft.txt").exists()
    assert git(tree.repo, "show", f"{ref}:draft.txt") == "unsaved"
    assert git(tree.repo, "show", f"{ref}:README.md") == "edited"
    assert [r.operation for r in list_rescues(tree.repo)] == ["continue --clean"]


# ---- the subtree's ends -------------------------------------------------------------


def _gate(tree: Tree, node: str, name: str) -> int:
    force_status(tree, node, "active")
    ledger = Ledger(tree.db_path)
    run = ledger.open_run(node, agent=None, max_cost=None, parent_run_id=None)
    gate = ledger.open_step(node=node, run_id=run, iter_id=None, step=2, step_name=name,
                            agent=None, model=None, session=None, gated=True)
    ledger.mark_awaiting_approval(gate)  # its agent's turn is over: the loop marks it so
    return gate


def test_pending_at_the_root_inside_a_node_and_with_all(tree: Tree) -> None:
    from fractal.lifecycle.approve import pending

    _gate(tree, "main.a.b", "EXECUTE")
    _gate(tree, "main.c", "SHIP")
    assert [r["branch"] for r in pending(open_context(tree.repo), None)] == ["main.a.b", "main.c"]
    assert [r["branch"] for r in pending(open_context(tree.repo), "a")] == ["main.a.b"]
    assert [r["branch"] for r in pending(open_context(tree.worktree_of("main.a")), None)] == ["main.a.b"]
    assert pending(open_context(tree.repo), "main.a.b") == []
    assert [r["branch"] for r in pending(open_context(tree.repo), "a", whole=True)] == ["main.a.b"]


def test_status_of_a_settled_node_names_descendants_still_running(tree: Tree) -> None:
    force_status(tree, "main.a", "completed")
    _gate(tree, "main.a.b", "EXECUTE")
    assert node_status(open_context(tree.repo), "a").detail.endswith(
        "ended with 1 child still running: main.a.b awaiting approval")


def test_a_missing_node_recovers_its_status_when_its_worktree_returns(tree: Tree) -> None:
    force_status(tree, "main.c", "completed")
    wt = tree.worktree_of("main.c")
    moved = wt.with_name("elsewhere")
    wt.rename(moved)
    assert node_status(open_context(tree.repo), "c").status == "missing"
    moved.rename(wt)
    assert node_status(open_context(tree.repo), "c").status == "completed"
    assert _status(tree, "main.c") == "completed"
    assert _events(tree, "main.c", "recover")[0][2].endswith("restored completed")


def test_an_idle_unretire_takes_its_spawn_slot_back_only_under_the_caps(tree: Tree) -> None:
    init_node(open_context(tree.repo), "p", {"max_children": 1})
    init_node(open_context(tree.repo), "x", {}, parent="p")
    retire(open_context(tree.repo), "main.p.x")  # frees p's one child slot
    init_node(open_context(tree.repo), "y", {}, parent="p")
    with pytest.raises(Refused, match="max_children 1"):
        unretire(open_context(tree.repo), "main.p.x")
    assert _status(tree, "main.p.x") == "retired"
    assert _events(tree, "main.p.x", "unretire")[0][0] == "failed"


def test_a_data_dir_renamed_by_destroy_is_no_tree_and_the_next_destroy_removes_it(
        tree: Tree) -> None:
    """While ``destroy`` removes the renamed data dir (or after a destroy killed there), no
    command finds it as a tree: it would read, write or re-create a database inside a
    directory being removed (``node list`` listed ``main.a`` from it, ``destroy``
    destroyed a tree named ``.main.destroyed-<pid>``)."""
    left = tree.data_dir.with_name(f".{tree.data_dir.name}.destroyed-1")
    shutil.copytree(tree.data_dir, left)
    shutil.rmtree(tree.data_dir)
    with pytest.raises(FractalError, match="no fractal tree"):
        open_context(tree.repo)
    init_tree(tree.repo)
    assert [t.root for t in trees_in(tree.repo)] == ["main"]
    destroy(open_context(tree.repo))
    assert not left.exists() and not (tree.repo / ".fractal").exists()
