"""``fractal node merge`` on real git and a real tree database: the squash, what never
travels, re-merges, every refusal, a conflict that leaves the target untouched, the
hand-back, and ``node diff`` / ``node conflicts``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fractal.errors import FractalError
from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.conflicts import children_conflict_detail, node_conflicts
from fractal.lifecycle.merge.diff import node_diff
from fractal.lifecycle.merge.squash import MergeConflict, merge_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.steering.signal import Refused
from fractal.lifecycle.trees import init_tree
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from fractal.workspace.handback import read_note
from tests.helpers import copy_of_tree, git, make_repo
from tests.integration.test_commit_conflicts import snapshot
from tests.trees import run_cli, run_cli_as


@dataclass
class Setup:
    repo: Path
    tree: Tree

    def wt(self, name: str) -> Path:
        return self.tree.worktree_of(f"main.{name}")

    def write(self, where: Path, rel: str, text: str, message: str) -> None:
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(where, "add", "-A")
        git(where, "commit", "-q", "-m", message)

    def set_status(self, node: str, status: str) -> None:
        con = sqlite3.connect(self.tree.db_path)
        try:
            with con:
                con.execute("UPDATE nodes SET status = ? WHERE node = ?", (status, node))
        finally:
            con.close()

    def rows(self) -> list[tuple[object, ...]]:
        con = sqlite3.connect(self.tree.db_path)
        try:
            return list(con.execute("SELECT child, target, status, files, actor, metadata, "
                                    "squash_sha FROM merges ORDER BY merge_id"))
        finally:
            con.close()

    def events(self, node: str) -> list[tuple[object, ...]]:
        con = sqlite3.connect(self.tree.db_path)
        try:
            return list(con.execute("SELECT status, actor, metadata FROM events WHERE node = ? "
                                    "AND event = 'merge' ORDER BY event_id", (node,)))
        finally:
            con.close()


def _build(repo: Path) -> None:
    make_repo(repo)
    (repo / "calc").mkdir()
    (repo / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc")
    init_tree(repo)
    for name in ("a", "b"):
        init_node(open_context(repo), name, {"title": f"work {name}"})


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """``calc/ops.py`` committed, then nodes ``main.a`` and ``main.b``: built by the verbs
    once per test process and copied for each test."""
    repo = copy_of_tree(tmp_path / "repo", "merge-calc-a-b", _build)
    return Setup(repo, Tree(repo=repo, root="main"))


def test_a_clean_squash_lands_without_node_dirs_or_artifacts(setup: Setup) -> None:
    wt = setup.wt("a")
    setup.write(wt, "calc/ops.py", "def add(a, b):\n    return b + a\n", "swap")
    setup.write(wt, "calc/mul.py", "def mul(a, b):\n    return a * b\n", "mul")
    (wt / "cache.db").write_text("artifact\n")
    git(wt, "add", "-f", "cache.db")
    git(wt, "commit", "-q", "-m", "a db by hand")
    before = git(setup.repo, "rev-parse", "main")
    untracked = git(setup.repo, "status", "--porcelain")  # the project wiki fractal init made
    result = merge_node(open_context(setup.repo), "a")
    assert result.status == "merged" and result.files == 2
    assert git(setup.repo, "rev-parse", "main") == result.squash_sha
    assert git(setup.repo, "rev-parse", "main^") == before
    listed = git(setup.repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert not [p for p in listed if p.startswith(".fractal/main.")]
    assert "cache.db" not in listed and "calc/mul.py" in listed
    message = git(setup.repo, "log", "-1", "--format=%B", "main")
    assert message.startswith("main: merge main.a (work a)\n\n- a db by hand\n- mul\n- swap")
    assert "2 files changed" in message
    assert git(setup.repo, "status", "--porcelain") == untracked  # nothing left behind
    assert setup.rows() == [("main.a", "main", "merged", 2, "operator", "", result.squash_sha)]
    assert setup.events("main.a")[-1][:2] == ("completed", "operator")
    # The merge base advanced: merging again brings nothing, new work only the new work.
    assert merge_node(open_context(setup.repo), "a").status == "nothing"
    setup.write(wt, "calc/div.py", "def div(a, b):\n    return a / b\n", "div")
    again = merge_node(open_context(setup.repo), "a")
    assert again.status == "merged" and again.files == 1
    body = git(setup.repo, "log", "-1", "--format=%b", "main")
    assert "- div" in body and "- swap" not in body


def test_nothing_to_merge_still_names_the_childs_uncommitted_files(setup: Setup) -> None:
    """A child whose only work is uncommitted (a killed agent's edit, say) has nothing to
    merge; the merge says so and points at the files left in its worktree."""
    (setup.wt("a") / "calc" / "ops.py").write_text("def add(a, b):\n    return 0\n")
    result = merge_node(open_context(setup.repo), "a")
    assert result.status == "nothing"
    assert result.notices == (
        "nothing new to merge: main already holds all of main.a's work",
        "main.a has 1 uncommitted file(s) that did not travel (calc/ops.py); commit them "
        "there and merge again")


def test_a_conflict_leaves_the_target_exactly_as_it_was(setup: Setup) -> None:
    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return a + b + 0\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return int(a) + b\n", "main")
    (setup.repo / "notes.txt").write_text("untracked, kept\n")
    (setup.repo / ".fractal" / "main" / "scratch.md").write_text("own node dir, dirty\n")
    before = snapshot(setup.repo)
    with pytest.raises(MergeConflict) as caught:
        merge_node(open_context(setup.repo), "a")
    assert caught.value.files == ("calc/ops.py",)
    assert "calc/ops.py" in str(caught.value) and "--hand-back" in str(caught.value)
    assert snapshot(setup.repo) == before
    assert setup.rows()[-1][:3] == ("main.a", "main", "failed")


def test_hand_back_then_a_clean_re_merge(setup: Setup) -> None:
    wt = setup.wt("a")
    setup.write(wt, "calc/ops.py", "def add(a, b):\n    return a + b + 0\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return int(a) + b\n", "main")
    before = snapshot(setup.repo)
    result = merge_node(open_context(setup.repo), "a", hand_back=True)
    assert result.status == "handed-back" and result.conflicts == ("calc/ops.py",)
    assert not result.rearmed and "start" in " ".join(result.notices)  # never ran: idle
    # the hint is the verb that works on an idle node: a plain start, not --continue
    assert "run `fractal node start main.a`" in " ".join(result.notices)
    assert snapshot(setup.repo) == before
    assert "<<<<<<<" in (wt / "calc" / "ops.py").read_text()
    note = read_note(setup.tree.node("main.a").node_dir)
    assert note is not None and note.target == "main" and note.files == ("calc/ops.py",)
    (wt / "calc" / "ops.py").write_text("def add(a, b):\n    return int(a) + b + 0\n")
    git(wt, "add", "calc/ops.py")
    git(wt, "commit", "-q", "--no-edit")
    merged = merge_node(open_context(setup.repo), "a")
    assert merged.status == "merged"
    assert git(setup.repo, "show", "main:calc/ops.py") == \
        "def add(a, b):\n    return int(a) + b + 0"
    assert read_note(setup.tree.node("main.a").node_dir) is None
    # each posted its notice to the child's outbox, for the ancestors' feed
    import sqlite3

    con = sqlite3.connect(setup.tree.db_path)
    try:
        subjects = [s for (s,) in con.execute(
            "SELECT subject FROM messages WHERE node = 'main.a' AND channel = 'outbox' "
            "ORDER BY message_id")]
    finally:
        con.close()
    assert [s.split(" (")[0] for s in subjects[-2:]] == [
        "main handed a conflict back to main.a", "main.a merged into main"], subjects


def test_a_hand_back_over_marker_files_left_uncommitted_says_to_drop_them(setup: Setup) -> None:
    wt = setup.wt("a")
    setup.write(wt, "calc/ops.py", "def add(a, b):\n    return a + b + 0\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return int(a) + b\n", "main")
    left = "<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> main\n"  # an interrupted one's
    (wt / "calc" / "ops.py").write_text(left)
    before = snapshot(wt)
    with pytest.raises(Refused) as refused:
        merge_node(open_context(setup.repo), "a", hand_back=True)
    assert "conflict markers (calc/ops.py)" in str(refused.value)
    assert "git checkout -- calc/ops.py" in str(refused.value)
    assert snapshot(wt) == before and (wt / "calc" / "ops.py").read_text() == left


def test_an_unresolved_hand_back_is_refused_with_the_ways_that_work(setup: Setup) -> None:
    wt = setup.wt("a")
    setup.write(wt, "calc/ops.py", "def add(a, b):\n    return a + b + 0\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return int(a) + b\n", "main")
    merge_node(open_context(setup.repo), "a", hand_back=True)
    setup.set_status("main.a", "exited")  # its run ended without resolving the conflict
    with pytest.raises(MergeConflict) as caught:
        merge_node(open_context(setup.repo), "a")
    text = str(caught.value)
    assert "--hand-back" not in text
    assert f"{wt}" in text and "git commit --no-edit" in text
    assert "fractal node start main.a --continue" in text
    with pytest.raises(Refused) as again:
        merge_node(open_context(setup.repo), "a", hand_back=True)
    assert "git commit --no-edit" in str(again.value)
    from fractal.lifecycle.inbox import node_facts

    facts = {f.branch: f for f in node_facts(setup.tree, diffstats=False)[0]}
    hand = facts["main.a"].merge
    assert hand is not None and hand.unresolved == str(wt)
    (wt / "calc" / "ops.py").write_text("def add(a, b):\n    return int(a) + b + 0\n")
    git(wt, "add", "calc/ops.py")
    git(wt, "commit", "-q", "--no-edit")  # the first way out the refusal names
    assert merge_node(open_context(setup.repo), "a").status == "merged"


def test_a_hand_back_resolved_by_hand_after_its_run_exited_merges(setup: Setup) -> None:
    """The run re-armed by the hand-back exited without resolving it: refused (naming
    --force) while the conflict is there, merged once it is resolved and committed by
    hand, as the refusal says."""
    wt = setup.wt("a")
    setup.write(wt, "calc/ops.py", "def add(a, b):\n    return a + b + 0\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return int(a) + b\n", "main")
    merge_node(open_context(setup.repo), "a", hand_back=True)
    ledger = Ledger(setup.tree.db_path)
    run = ledger.open_run("main.a", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, "Exited at iteration 1.1")
    setup.set_status("main.a", "exited")
    with pytest.raises(Refused, match=r"still holds the conflict.*--force"):
        merge_node(open_context(setup.repo), "a")
    (wt / "calc" / "ops.py").write_text("def add(a, b):\n    return int(a) + b + 0\n")
    git(wt, "add", "calc/ops.py")
    git(wt, "commit", "-q", "--no-edit")
    assert merge_node(open_context(setup.repo), "a").status == "merged"
    assert git(setup.repo, "show", "main:calc/ops.py") == \
        "def add(a, b):\n    return int(a) + b + 0"


def test_a_child_whose_run_landed_on_its_budget_merges(setup: Setup) -> None:
    setup.write(setup.wt("a"), "calc/more.py", "X = 1\n", "a")
    ledger = Ledger(setup.tree.db_path)
    run = ledger.open_run("main.a", agent="stub", max_cost=1.0, parent_run_id=None)
    ledger.close_run(run, "exited", 0, "cost budget reserve reached (spent $0.9500 >= $1 max "
                     "- $0.1 reserve)")
    setup.set_status("main.a", "exited")
    assert merge_node(open_context(setup.repo), "a").status == "merged"
    broke = ledger.open_run("main.b", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(broke, "exited", 1, "Exited at iteration 1.2")
    setup.set_status("main.b", "exited")
    setup.write(setup.wt("b"), "calc/other.py", "Y = 1\n", "b")
    with pytest.raises(Refused, match="broke down"):
        merge_node(open_context(setup.repo), "b")


def test_refusals_are_explained_and_recorded(setup: Setup) -> None:
    ledger = Ledger(setup.tree.db_path)
    setup.write(setup.wt("a"), "x.txt", "x\n", "x")
    with pytest.raises(FractalError, match="a node merges its children"):
        merge_node(open_context(setup.wt("a")), None)
    (setup.repo / "README.md").write_text("dirty\n")
    with pytest.raises(Refused, match="uncommitted changes outside its node directory"):
        merge_node(open_context(setup.repo), "a")
    git(setup.repo, "checkout", "--", "README.md")
    setup.set_status("main.a", "active")
    with pytest.raises(Refused, match=r"main\.a is active"):
        merge_node(open_context(setup.repo), "a")
    setup.set_status("main.a", "completed")
    run = ledger.open_run("main.a", agent=None, max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, "crashed")
    with pytest.raises(Refused, match=r"exited.*--force"):
        merge_node(open_context(setup.repo), "a")
    with pytest.raises(Refused, match="only its own direct children"):
        merge_node(open_context(setup.wt("b")), "a")
    assert merge_node(open_context(setup.repo), "a", force=True).status == "merged"
    statuses = [e[0] for e in setup.events("main.a")]
    assert statuses == ["failed"] * 4 + ["completed"]


def test_a_node_merges_its_child_into_itself(setup: Setup) -> None:
    init_node(open_context(setup.wt("a")), "c", {})
    child_wt = setup.tree.worktree_of("main.a.c")
    setup.write(child_wt, "calc/c.py", "c = 1\n", "c")
    with pytest.raises(Refused, match="only into itself"):
        merge_node(open_context(setup.wt("a")), "main.a.c", into="main")
    result = merge_node(open_context(setup.wt("a")), "main.a.c")
    assert result.target == "main.a" and result.status == "merged"
    listed = git(setup.repo, "ls-tree", "-r", "--name-only", "main.a").splitlines()
    assert "calc/c.py" in listed and not any(p.startswith(".fractal/main.a.c/") for p in listed)
    assert setup.rows()[-1][4] == "main.a"


def test_diff_and_conflicts(setup: Setup) -> None:
    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return 1\n", "a")
    setup.write(setup.wt("b"), "calc/ops.py", "def add(a, b):\n    return 2\n", "b")
    setup.write(setup.wt("b"), "calc/other.py", "o = 1\n", "o")
    diff = node_diff(open_context(setup.repo), "b", stat=True)
    assert "calc/other.py" in diff.text and ".fractal" not in diff.text
    assert "+    return 1" in node_diff(open_context(setup.repo), "a").text
    report = node_conflicts(open_context(setup.repo), None)
    found = {(p.left, p.right): p.files for p in report.pairs}
    assert found == {("main.a", "main"): (), ("main.b", "main"): (),
                     ("main.a", "main.b"): ("calc/ops.py",)}
    assert children_conflict_detail(setup.tree, "main") == ""
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return 3\n", "main")
    assert children_conflict_detail(setup.tree, "main") == "2 children conflict (calc/ops.py)"
    with pytest.raises(Refused, match="descendants"):
        node_diff(open_context(setup.wt("b")), "a")


def test_a_merged_child_is_no_longer_reported_as_conflicting(setup: Setup) -> None:
    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return 1\n", "a")
    setup.write(setup.wt("b"), "calc/ops.py", "def add(a, b):\n    return 2\n", "b")
    merge_node(open_context(setup.repo), "main.a")
    report = node_conflicts(open_context(setup.repo), None)
    found = {(p.left, p.right): p.files for p in report.pairs}
    # a's work is in main now: b conflicts with main's tip, and a is no one's rival
    assert found == {("main.b", "main"): ("calc/ops.py",)}


def test_the_cli_prints_the_sha_and_exits_1_on_a_conflict(setup: Setup) -> None:

    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return 1\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return 3\n", "main")
    proc = run_cli(["node", "merge", "a"], setup.repo, check=False)
    assert proc.returncode == 1 and "calc/ops.py" in proc.stderr and proc.stdout == ""


def test_an_unapproved_gate_needs_force_and_pending_shows_the_diffstat(setup: Setup) -> None:
    from fractal.lifecycle.approve import pending

    ledger = Ledger(setup.tree.db_path)
    setup.write(setup.wt("a"), "calc/new.py", "n = 1\nm = 2\n", "new")
    run = ledger.open_run("main.a", agent=None, max_cost=None, parent_run_id=None)
    iter_id = ledger.open_iteration("main.a", run, 1, agent=None, model=None)
    gate = ledger.open_step(node="main.a", run_id=run, iter_id=iter_id, step=2,
                            step_name="EXECUTE", agent=None, model=None, session=None,
                            gated=True)
    ledger.mark_awaiting_approval(gate)  # its agent's turn is over: the loop marks it so
    setup.set_status("main.a", "active")
    rows = pending(open_context(setup.repo), None)
    assert [(r["branch"], r["step_name"], r["diffstat"]) for r in rows] == [
        ("main.a", "EXECUTE", "1 file changed, 2 insertions(+)")]
    gate_b = ledger.open_step(node="main.b", run_id=ledger.open_run(
        "main.b", agent=None, max_cost=None, parent_run_id=None), iter_id=None, step=2,
        step_name="EXECUTE", agent=None, model=None, session=None, gated=True)
    ledger.mark_awaiting_approval(gate_b)
    setup.set_status("main.b", "active")
    (setup.wt("b") / "calc" / "wip.py").write_text("w = 1\n")  # edits not committed yet
    (setup.wt("b") / "calc" / "ops.py").write_text("changed\n")
    rows = pending(open_context(setup.repo), None)
    assert {r["branch"]: r["diffstat"] for r in rows}["main.b"] == \
        "nothing new; 2 uncommitted file(s)"
    from fractal.lifecycle.inbox import gate_diffstat

    assert gate_diffstat(setup.tree, "main.b") == "no changes; 2 uncommitted file(s)"
    assert gate_diffstat(setup.tree, "main.a") == "1 file changed, 2 insertions(+)"
    ledger.close_open("main.a", "stopped", "finish requested awaiting approval")
    setup.set_status("main.a", "completed")
    with pytest.raises(Refused, match="EXECUTE never approved"):
        merge_node(open_context(setup.repo), "a")
    assert merge_node(open_context(setup.repo), "a", force=True).status == "merged"


@pytest.mark.parametrize("reached", [True, False], ids=["waiting-at-it", "before-it"])
def test_a_kill_at_a_gate_refuses_the_merge_before_the_run_rows_close(
        setup: Setup, reached: bool) -> None:
    """Issue 30: ``node kill`` moves the node to ``killed`` in its first transaction and
    closes the run's rows only once its processes are gone. A merge in between (the
    parent's loop woke on the settled child) still finds the gate never approved: the
    one its run waited at, or one the run's ``gates`` event named and it never reached."""
    from fractal.domain.gates import GATES_EVENT, gates_note
    from fractal.domain.signals import Signal
    from fractal.domain.states import Move
    from fractal.store.transition import EventNote, SignalNote

    ledger = Ledger(setup.tree.db_path)
    setup.write(setup.wt("a"), "calc/new.py", "n = 1\n", "new")
    run = ledger.open_run("main.a", agent=None, max_cost=None, parent_run_id=None)
    ledger.add_event("main.a", GATES_EVENT, actor="loop", status="completed",
                     metadata=gates_note(["EXECUTE"]), run_id=run)
    iter_id = ledger.open_iteration("main.a", run, 1, agent=None, model=None)
    if reached:
        gate = ledger.open_step(node="main.a", run_id=run, iter_id=iter_id, step=2,
                                step_name="EXECUTE", agent=None, model=None, session=None,
                                gated=True)
        ledger.mark_awaiting_approval(gate)
    setup.set_status("main.a", "active")
    note = "killed by operator"
    assert ledger.move("main.a", Move.KILL, event=EventNote(
        Signal.KILL.value, actor="operator", metadata=note, run_id=run),
        signal=SignalNote(run, Signal.KILL.value, note)).ok
    last = ledger.last_run("main.a")
    assert last is not None and last.ended_at is None  # the racing state: rows still open
    with pytest.raises(Refused, match=r"last run ended \(killed\) with EXECUTE never approved"):
        merge_node(open_context(setup.repo), "a")
    assert merge_node(open_context(setup.repo), "a", force=True).status == "merged"


@pytest.mark.parametrize(("then", "status"), [("retire", "retired"), ("delete", None)])
def test_retire_or_delete_after_the_merge(setup: Setup, then: str, status: str | None) -> None:
    from fractal.lifecycle.merge.squash import merge_then_clean

    setup.write(setup.wt("a"), "calc/new.py", "n = 1\n", "new")
    result = merge_then_clean(open_context(setup.repo), "a", then=then)
    assert result.status == "merged" and result.notices[-1].startswith(then[:-1])
    row = Ledger(setup.tree.db_path).node("main.a")
    assert (row.status if row else None) == status
    assert not setup.wt("a").exists()
    assert "calc/new.py" in git(setup.repo, "ls-tree", "-r", "--name-only", "main")


def _interrupted(setup: Setup) -> tuple[int, str, str]:
    """A merge of ``a`` booked active with its squash written, the target not moved yet."""
    from fractal.store.merges import MergeBook
    from fractal.workspace.merge import plan_squash, write_squash_commit

    setup.write(setup.wt("a"), "calc/new.py", "n = 1\n", "new")
    plan = plan_squash(setup.repo, "main.a", "main")
    squash = write_squash_commit(setup.repo, plan, "main: merge main.a (work a)")
    merge_id = MergeBook(setup.tree.db_path).book_merge(
        child="main.a", target="main", child_sha=plan.child_sha, target_sha=plan.target_sha,
        squash_sha=squash, files=len(plan.files), actor="operator")
    return merge_id, plan.target_sha, squash


def test_a_merge_cut_short_before_the_target_moved_is_rolled_back(setup: Setup) -> None:
    from fractal.workspace.commit_lock import index_lock_path

    _interrupted(setup)
    (setup.repo / "calc" / "new.py").write_text("n = 1\n")  # half a checkout
    index_lock_path(setup.repo).write_text("")  # and the lock a killed git left
    result = merge_node(open_context(setup.repo), "a")
    assert result.status == "merged"
    assert any("rolled back (1 file(s) restored)" in n for n in result.notices)
    assert any("rescue" in n for n in result.notices)
    assert [r[2] for r in setup.rows()] == ["failed", "merged"]
    assert git(setup.repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(setup.repo, "for-each-ref", "--format=%(refname)", "refs/fractal/rescue/")


def test_a_merge_cut_short_after_the_target_moved_is_finished(setup: Setup) -> None:
    _merge_id, _old, squash = _interrupted(setup)
    git(setup.repo, "merge", "-q", "--ff-only", squash)
    result = merge_node(open_context(setup.repo), "a")
    assert result.status == "nothing"
    assert any("finished the interrupted merge" in n for n in result.notices)
    assert setup.rows() == [("main.a", "main", "merged", 1, "operator",
                             " (finished after an interruption)", squash)]
    assert git(setup.repo, "merge-base", "--is-ancestor", squash, "main.a") == ""


def test_the_read_commands_through_the_cli(setup: Setup) -> None:
    import json

    from fractal.lifecycle.reads.nodes import node_status

    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return 1\n", "a")
    setup.write(setup.wt("b"), "calc/ops.py", "def add(a, b):\n    return 2\n", "b")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(list(args), setup.repo, check=False)

    piped = cli("node", "conflicts").stdout.splitlines()  # stdout is not a terminal: CSV
    assert piped[0] == "left,right,conflicts,files"
    assert "main.a,main.b,True,calc/ops.py" in piped
    report = json.loads(cli("node", "conflicts", "--json").stdout)
    assert report["node"] == "main"
    assert {(p["left"], p["right"]): p["files"] for p in report["pairs"]} == {
        ("main.a", "main"): [], ("main.b", "main"): [], ("main.a", "main.b"): ["calc/ops.py"]}
    stat = cli("node", "diff", "a", "--stat")
    assert stat.returncode == 0 and "calc/ops.py" in stat.stdout and ".fractal" not in stat.stdout
    init_node(open_context(setup.wt("a")), "c", {})
    setup.write(setup.tree.worktree_of("main.a.c"), "calc/ops.py",
                "def add(a, b):\n    return 3\n", "c")
    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return 4\n", "a again")
    assert node_status(open_context(setup.repo), "a").line == "idle (1 child conflicts (calc/ops.py))"
    assert "1 child conflicts (calc/ops.py)" in cli("node", "status", "a").stdout


def test_a_child_handed_back_while_its_parent_stops_is_not_re_armed(setup: Setup) -> None:
    """Its siblings got the parent's stop; a child re-armed after it would run on alone
    once the parent's run ended. It is left settled, the conflict waiting, with the way
    on."""
    import psutil

    from fractal.domain.signals import Signal
    from fractal.domain.states import Move
    from fractal.lifecycle.steering.signal import send
    from fractal.store.ledger import Ledger

    init_node(open_context(setup.repo), "c", {"title": "work c"}, parent="a")
    child_wt = setup.tree.worktree_of("main.a.c")
    setup.write(child_wt, "calc/ops.py", "def add(a, b):\n    return a + b + 0\n", "c")
    setup.write(setup.wt("a"), "calc/ops.py", "def add(a, b):\n    return int(a) + b\n", "a")
    setup.set_status("main.a.c", "completed")
    ledger = Ledger(setup.tree.db_path)
    me = psutil.Process()  # the lead's live supervisor, as far as any heal can tell
    assert ledger.move("main.a", Move.START, supervisor=(me.pid, me.create_time())).ok
    ledger.open_run("main.a", agent="true", max_cost=None, parent_run_id=None)
    send(open_context(setup.repo), "a", Signal.STOP)  # the operator stops the lead
    lead_loop = {"_NODE": str(setup.tree.node("main.a").node_dir)}  # its agent merges
    result = merge_node(open_context(setup.wt("a"), lead_loop), "a.c", hand_back=True)
    assert result.status == "handed-back" and not result.rearmed
    assert any("parent's run is ending (stop pending)" in n and "--continue" in n
               for n in result.notices), result.notices
    row = ledger.node("main.a.c")
    assert row is not None and row.status.value == "completed"  # no new run
    assert "<<<<<<<" in (child_wt / "calc" / "ops.py").read_text()  # the conflict waits


def test_diff_shows_the_uncommitted_work_at_a_gate_labelled(setup: Setup) -> None:
    """At a gate on EXECUTE the work is not committed yet: the diff shows it, under its
    own heading, instead of saying the target holds everything."""
    wt = setup.wt("a")
    (wt / "g2.txt").write_text("new work\n")  # untracked, not ignored
    (wt / "calc" / "ops.py").write_text("def add(a, b):\n    return b + a\n")
    (wt / ".fractal" / "main.a" / "scratch.txt").write_text("never shown\n")
    shown = node_diff(open_context(setup.repo), "a")
    header, _, rest = shown.text.partition("\n")
    assert header.startswith("# uncommitted in ") and str(wt) in header
    assert "+new work" in rest and "+    return b + a" in rest and "scratch" not in rest
    assert any("nothing new committed" in n for n in shown.notices)
    assert not any(n.startswith("nothing new:") for n in shown.notices)
    stat = node_diff(open_context(setup.repo), "a", stat=True)
    assert "g2.txt" in stat.text and "2 files changed" in stat.text
    assert git(wt, "status", "--porcelain") != "" and "g2.txt" not in git(wt, "ls-files")
    (wt / "calc" / "more.py").write_text("m = 1\n")  # committed work comes first
    git(wt, "add", "calc/more.py")
    git(wt, "commit", "-q", "-m", "more")
    both = node_diff(open_context(setup.repo), "a", stat=True).text
    assert both.index("calc/more.py") < both.index("# uncommitted") < both.index("g2.txt")


def test_a_leads_refused_merge_is_recorded_where_the_operator_looks(setup: Setup) -> None:
    """The lead's agent merges its child from inside a step while the lead's worktree has
    uncommitted changes: refused, and the refusal is in the merges table (the inbox's
    merge item), the lead's own activity and the feed, not only in the pane."""
    init_node(open_context(setup.wt("a")), "c", {})
    setup.write(setup.tree.worktree_of("main.a.c"), "calc/c.py", "c = 1\n", "c")
    (setup.repo / "README.md").write_text("dirty\n")  # the operator's refusal: printed only
    with pytest.raises(Refused, match="uncommitted changes"):
        merge_node(open_context(setup.repo), "main.a")
    git(setup.repo, "checkout", "--", "README.md")
    assert setup.rows() == []
    setup.set_status("main.a", "active")
    (setup.wt("a") / "calc" / "ops.py").write_text("half done\n")
    loop = {"_NODE": str(setup.tree.node("main.a").node_dir)}
    with pytest.raises(Refused, match=r"main\.a's worktree has uncommitted changes"):
        merge_node(open_context(setup.wt("a"), loop), "c")
    child, target, status, files, actor, reason, squash = setup.rows()[-1]
    assert (child, target, status, files, actor, squash) == (
        "main.a.c", "main.a", "failed", None, "main.a", None)
    assert str(reason).startswith("refused: main.a's worktree has uncommitted changes")
    assert setup.events("main.a")[-1][:2] == ("failed", "main.a")
    assert str(setup.events("main.a")[-1][2]).startswith(
        "refused: merge of main.a.c: main.a's worktree has uncommitted changes")
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}
    activity = json.loads(run_cli(["node", "activity", "a", "--json"], setup.repo, env).stdout)
    assert any(r["event"] == "merge" and r["status"] == "failed" and "main.a.c" in r["reason"]
               for r in activity)
    from tests.helpers import no_hold

    no_hold(setup.repo)  # past the grace the lead had to act on it
    items = json.loads(run_cli(["inbox", "--json"], setup.repo, env).stdout)
    merge = [i for i in items if i["kind"] == "merge"]
    # The lead runs, so only its loop may merge into it: the item asks the lead.
    assert [(i["node"], i["command"]) for i in merge] == [
        ("main.a.c", "fractal radio send --node main.a --subject 'merge c' --priority 7 "
                     "'merge c: fractal inbox has the details'")]
    assert "did not land: refused: main.a's worktree" in str(merge[0]["summary"])
    feed = json.loads(run_cli(["radio", "feed", "--json"], setup.repo, env).stdout)
    assert feed[0]["subject"] == "main.a.c not merged into main.a: refused"
    assert "main.a's worktree has uncommitted changes" in str(feed[0]["data"])
    status = run_cli(["node", "status", "a"], setup.repo, env).stdout
    assert "merge of c refused (`fractal inbox` says why)" in status
    setup.set_status("main.a.c", "retired")  # the lead gave up on it: nothing to say
    assert "refused" not in run_cli(["node", "status", "a"], setup.repo, env).stdout
    setup.set_status("main.a.c", "idle")
    # the step that ran the merge is the agent's: nothing about its run changed
    assert Ledger(setup.tree.db_path).node("main.a").status == "active"
    git(setup.wt("a"), "checkout", "--", "calc/ops.py")
    assert merge_node(open_context(setup.wt("a"), loop), "c").status == "merged"
    assert "refused" not in run_cli(["node", "status", "a"], setup.repo, env).stdout
    items = json.loads(run_cli(["inbox", "--json"], setup.repo, env).stdout)
    assert [i for i in items if i["kind"] == "merge"] == []


def test_a_merge_that_finds_nothing_new_settles_the_hand_back_item(setup: Setup) -> None:
    """The child resolved the conflict handed back by taking the target's side, so its
    branch has nothing new: the merge says so, and the inbox's 'merge again' item goes."""
    wt = setup.wt("a")
    setup.write(wt, "calc/ops.py", "def add(a, b):\n    return 1\n", "a")
    setup.write(setup.repo, "calc/ops.py", "def add(a, b):\n    return 2\n", "main")
    assert merge_node(open_context(setup.repo), "a", hand_back=True).status == "handed-back"
    git(wt, "checkout", "--theirs", "--", "calc/ops.py")
    git(wt, "add", "calc/ops.py")
    git(wt, "commit", "-q", "--no-edit")
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}

    def merge_items() -> list[object]:
        items = json.loads(run_cli(["inbox", "--json"], setup.repo, env).stdout)
        return [i["summary"] for i in items if i["kind"] == "merge"]

    assert len(merge_items()) == 1
    assert merge_node(open_context(setup.repo), "a").status == "nothing"
    assert merge_items() == []
    assert setup.rows()[-1][:3] == ("main.a", "main", "merged")
    rows = len(setup.rows())
    assert merge_node(open_context(setup.repo), "a").status == "nothing"
    assert len(setup.rows()) == rows  # nothing outstanding: nothing more to book


def test_a_merge_into_a_branch_that_does_not_exist_says_so(setup: Setup) -> None:
    setup.write(setup.wt("a"), "x.txt", "x\n", "x")
    with pytest.raises(FractalError, match=r"branch nosuch does not exist") as raised:
        merge_node(open_context(setup.repo), "a", into="nosuch")
    assert "git worktree add" not in str(raised.value)
    git(setup.repo, "branch", "side")  # exists, checked out nowhere: the worktree hint
    with pytest.raises(FractalError, match=r"git worktree add PATH side"):
        merge_node(open_context(setup.repo), "a", into="side")


def test_conflicts_says_how_many_children_it_skipped_and_why(cousins: Path) -> None:
    out = run_cli_as(cousins, "node", "conflicts")
    assert out.returncode == 0, out.stderr
    assert ("notice: every child of main skipped, nothing of them left to collide (no work "
            "to merge: a1, a2)") in out.stderr  # never merged: not "already merged"
    assert "has no children" not in out.stderr
    a1 = cousins / ".worktrees" / "main.a1"
    (a1 / "work.txt").write_text("a1\n")
    git(a1, "add", "work.txt")
    git(a1, "commit", "-q", "-m", "a1 work")
    out = run_cli_as(cousins, "node", "conflicts")
    assert out.returncode == 0, out.stderr
    assert "main.a1,main,False" in out.stdout
    assert "notice: 1 child of main skipped, nothing of it left to collide (no work to " \
        "merge: a2)" in out.stderr
    leaf = run_cli_as(cousins, "node", "conflicts", "a1.x")
    assert leaf.returncode == 0 and "main.a1.x has no children to compare" in leaf.stderr
    assert run_cli_as(cousins, "node", "merge", "a1").returncode == 0
    out = run_cli_as(cousins, "node", "conflicts")
    assert ("notice: every child of main skipped, nothing of them left to collide (already "
            "merged: a1; no work to merge: a2)") in out.stderr


def test_a_subtree_with_unmerged_or_handed_back_work_needs_force(setup: Setup) -> None:
    """A settled grandchild whose work never reached its parent, or one holding a conflict
    handed back to it, keeps the parent from merging up without --force, named; once the
    grandchild is merged into its parent, the parent merges."""
    from fractal.workspace.handback import HandBack, write_note

    init_node(open_context(setup.repo), "x", {"title": "work x"}, parent="a")
    x_wt = setup.tree.worktree_of("main.a.x")
    setup.write(x_wt, "calc/x.py", "x = 1\n", "x")
    setup.write(setup.wt("a"), "calc/a.py", "a = 1\n", "a")
    for node in ("main.a", "main.a.x"):
        setup.set_status(node, "completed")
    with pytest.raises(Refused, match=r"main\.a's subtree holds work that never reached "
                                      r"main\.a: main\.a\.x \(completed, its work never "
                                      r"merged into main\.a\)"):
        merge_node(open_context(setup.repo), "a")
    note = setup.tree.node("main.a.x").node_dir
    write_note(note, HandBack("main.a", git(setup.repo, "rev-parse", "main.a"), ("calc/x.py",)))
    with pytest.raises(Refused, match=r"main\.a\.x \(a conflict handed back to it"):
        merge_node(open_context(setup.repo), "a")
    (note / ".handback").unlink()
    assert merge_node(open_context(setup.repo), "a.x").status == "merged"
    merged = merge_node(open_context(setup.repo), "a")
    assert merged.status == "merged"
    assert git(setup.repo, "show", "main:calc/x.py") == "x = 1"


def test_force_takes_a_node_without_its_subtree_unmerged_work(setup: Setup) -> None:
    init_node(open_context(setup.repo), "x", {}, parent="a")
    setup.write(setup.tree.worktree_of("main.a.x"), "calc/x.py", "x = 1\n", "x")
    setup.write(setup.wt("a"), "calc/a.py", "a = 1\n", "a")
    setup.set_status("main.a.x", "stopped")
    assert merge_node(open_context(setup.repo), "a", force=True).status == "merged"
    listed = git(setup.repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert "calc/a.py" in listed and "calc/x.py" not in listed

