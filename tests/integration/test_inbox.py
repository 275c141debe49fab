"""``fractal inbox`` on a real tree: rows written through the ledger, read by the CLI."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import copy_of_tree, force_status, git, make_repo, no_hold
from tests.trees import run_cli, run_cli_as


def _fractal(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), repo, check=False)


def _build(repo: Path) -> None:
    make_repo(repo)
    for args in (["init"], ["node", "init", "ended"], ["node", "init", "parked"],
                 ["node", "init", "gated"], ["node", "init", "quiet"]):
        assert _fractal(repo, *args).returncode == 0


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A tree with four idle nodes, made by the CLI once per test process and copied."""
    yield copy_of_tree(tmp_path / "repo", "inbox-four", _build)
    close_engines()


def _items(repo: Path, *flags: str) -> list[dict[str, object]]:
    out = _fractal(repo, "inbox", "--json", *flags)
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    assert isinstance(items, list)
    return items


def test_inbox_lists_each_kind_oldest_first_and_ack_hides_it(repo: Path) -> None:
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.ended", agent="stub", max_cost=2.0, parent_run_id=None)
    step = ledger.open_step(node="main.ended", run_id=run, iter_id=None, step=1,
                            step_name="EXECUTE", agent="stub", model=None, session=None)
    ledger.close_step(step, "completed", 0, "", cost=0.5)
    ledger.close_run(run, "exited", 1, "Exited at iteration 1.1")
    force_status(ledger.db_path, "main.ended", "exited")

    parked = ledger.open_run("main.parked", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.parked", "paused")
    ledger.add_event("main.parked", "pause", actor="loop", status="completed",
                     metadata="parked before EXECUTE", run_id=parked)

    worktree = repo / ".worktrees" / "main.gated"
    (worktree / "work.txt").write_text("one\ntwo\n")
    git(worktree, "add", "work.txt")
    git(worktree, "commit", "-q", "-m", "work")
    gated = ledger.open_run("main.gated", agent="stub", max_cost=None, parent_run_id=None)
    gate = ledger.open_step(node="main.gated", run_id=gated, iter_id=None, step=2,
                            step_name="REVIEW", agent="stub", model=None, session=None,
                            gated=True)
    ledger.mark_awaiting_approval(gate)  # its agent's turn is over: the loop marks it so
    force_status(ledger.db_path, "main.gated", "active")

    items = _items(repo)
    assert [(i["kind"], i["node"]) for i in items] == [
        ("exited", "main.ended"), ("paused", "main.parked"), ("gate", "main.gated")]
    ended, paused, waiting = items
    assert ended["command"] == "fractal node start main.ended --continue"
    assert "spent $0.5000 of $2.0000" in str(ended["summary"])
    assert paused["command"] == "fractal node resume main.parked"
    assert waiting["command"] == f"fractal node approve main.gated {gate}"
    assert "1 file changed" in str(waiting["summary"])  # work.txt; the node dir stays out

    text = _fractal(repo, "inbox")
    assert f"-> fractal node approve main.gated {gate}" in text.stdout

    acked = _fractal(repo, "inbox", "ack", str(ended["id"]))
    assert acked.returncode == 0, acked.stderr
    assert [i["node"] for i in _items(repo)] == ["main.parked", "main.gated"]
    assert [i["acked"] for i in _items(repo, "--all")] == [True, False, False]

    again = ledger.open_run("main.ended", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(again, "exited", 1, "Exited at iteration 2.1")  # its state changed
    assert [i["node"] for i in _items(repo)] == ["main.parked", "main.gated", "main.ended"]

    unknown = _fractal(repo, "inbox", "ack", "deadbeef")
    assert unknown.returncode == 1
    assert "no inbox item 'deadbeef'" in unknown.stderr


def _send(repo: Path, node: str, subject: str, data: str) -> subprocess.CompletedProcess[str]:
    """``fractal radio send --parent`` from ``node``'s worktree (a top-level node's parent
    is the root: the operator)."""
    return _fractal(repo / ".worktrees" / node, "radio", "send", "--parent", "--subject",
                    subject, "--priority", "7", data)


def test_a_child_started_after_its_parents_run_ended_is_no_orphan_of_it(repo: Path) -> None:
    """The operator restarts a child once its parent's run has ended: the inbox raises
    no ``orphans`` item for that run (the child was not running when it ended)."""
    import sqlite3

    assert _fractal(repo / ".worktrees" / "main.ended", "node", "init", "kid").returncode == 0
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    ended = ledger.open_run("main.ended", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(ended, "completed", 0, "Reached max iterations (1)")
    force_status(ledger.db_path, "main.ended", "completed")
    kid = ledger.open_run("main.ended.kid", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.ended.kid", "active")
    con = sqlite3.connect(ledger.db_path)
    with con:  # a minute after the parent's end, whatever the clock's resolution
        con.execute("UPDATE runs SET started_at = strftime('%Y-%m-%dT%H:%M:%fZ', "
                    "(SELECT ended_at FROM runs WHERE run_id = ?), '+60 seconds') "
                    "WHERE run_id = ?", (ended, kid))
    con.close()
    assert "orphans" not in {i["kind"] for i in _items(repo)}


def test_inbox_lists_merges_usage_waits_orphans_and_messages(repo: Path) -> None:
    import time

    from fractal.store.merges import MergeBook
    from fractal.store.windows import Windows
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder

    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    db = ledger.db_path
    # A merge handed back to main.quiet, whose run has since ended.
    MergeBook(db).book_merge(child="main.quiet", target="main", child_sha="a" * 40,
                             target_sha="b" * 40, squash_sha=None, files=None,
                             actor="operator", status="failed",
                             reason="conflict in a.py; handed back to main.quiet")
    quiet = ledger.open_run("main.quiet", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(quiet, "completed", 0, "Reached max iterations (1)")
    force_status(db, "main.quiet", "completed")
    # main.gated waits for a closed usage window.
    gated = ledger.open_run("main.gated", agent="stub", max_cost=None, parent_run_id=None)
    wake = time.time() + 3600
    Windows(db).close("cred", "five_hour", wake, "main.gated", time.time())
    wake_at = Windows(db).window("cred")
    assert wake_at is not None
    shown = time.strftime("waiting for usage window until %H:%M:%SZ", time.gmtime(wake_at.wake_at))
    ledger.add_event("main.gated", "usage_wait", actor="loop", status="started",
                     metadata=shown, run_id=gated)
    force_status(db, "main.gated", "active")
    # main.ended ended while its child main.ended.kid still runs.
    assert _fractal(repo / ".worktrees" / "main.ended", "node", "init", "kid").returncode == 0
    ended = ledger.open_run("main.ended", agent="stub", max_cost=None, parent_run_id=None)
    ledger.open_run("main.ended.kid", agent="stub", max_cost=None, parent_run_id=ended)
    force_status(db, "main.ended.kid", "active")
    ledger.close_run(ended, "completed", 0, "Reached max iterations (1)")
    force_status(db, "main.ended", "completed")
    # main.parked messages the operator from its worktree.
    sent = _send(repo, "main.parked", "schema?", "need a decision on the schema")
    assert sent.returncode == 0, sent.stderr
    uuid = sent.stdout.strip().split()[-1]

    items = {str(i["kind"]): i for i in _items(repo)}
    assert set(items) >= {"merge", "usage", "orphans", "message"}
    assert items["merge"]["node"] == "main.quiet"
    assert items["merge"]["command"] == "fractal node merge main.quiet"
    assert items["usage"]["node"] == "main.gated"
    assert items["usage"]["command"] == "fractal node stop main.gated"
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wake_at.wake_at))
    assert f"until {until}" in str(items["usage"]["summary"])
    assert items["orphans"]["node"] == "main.ended"
    assert items["orphans"]["command"] == "fractal node finish main.ended"
    assert "main.ended.kid active" in str(items["orphans"]["summary"])
    assert items["message"]["node"] == "main.parked"
    assert items["message"]["command"] == f"fractal radio read {uuid}"
    assert "schema?" in str(items["message"]["summary"])

    # The dashboard's inbox pane is the same list.
    snap = Builder(find_tree(repo)).build(force=True)
    assert {e.item.key for e in snap.inbox} == {str(i["key"]) for i in _items(repo)}
    # Its tree line reads the wait, until when, and carries no stall mark.
    view = snap.node("main.gated")
    assert view is not None and not view.stalled
    assert view.detail(time.time()) == f"run {gated} · {shown}"

    # ack hides an item until its state changes; each command resolves its item.
    assert _fractal(repo, "inbox", "ack", str(items["orphans"]["id"])).returncode == 0
    assert "orphans" not in {i["kind"] for i in _items(repo)}
    assert _fractal(repo, "radio", "read", uuid).returncode == 0
    assert "message" not in {i["kind"] for i in _items(repo)}
    again = _send(repo, "main.parked", "ping", "are you there?")
    assert again.returncode == 0, again.stderr
    assert "message" in {i["kind"] for i in _items(repo)}


def test_the_dashboard_rereads_only_what_changed_and_stays_exact(repo: Path) -> None:
    """After each write the incremental snapshot equals one built from scratch."""
    from fractal.store.inbox import InboxStore
    from fractal.store.merges import MergeBook
    from fractal.store.outbox import Outbox
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder

    tree = find_tree(repo)
    ledger = Ledger(tree.db_path)
    live = Builder(tree)
    now = 2_000_000_000.0

    def same() -> None:
        kept, fresh = live.build(now=now), Builder(tree).build(now=now)
        assert kept.nodes == fresh.nodes
        assert kept.inbox == fresh.inbox

    same()
    run = ledger.open_run("main.ended", agent="stub", max_cost=1.0, parent_run_id=None)
    force_status(tree.db_path, "main.ended", "active")
    same()
    step = ledger.open_step(node="main.ended", run_id=run, iter_id=None, step=1,
                            step_name="REVIEW", agent="stub", model=None, session=None,
                            gated=True)
    same()
    ledger.close_step(step, "completed", 0, "", cost=0.25)
    ledger.close_run(run, "exited", 1, "Exited at iteration 1.1")
    force_status(tree.db_path, "main.ended", "exited")
    same()
    MergeBook(tree.db_path).book_merge(child="main.quiet", target="main", child_sha="a" * 40,
                                       target_sha="b" * 40, squash_sha=None, files=None,
                                       actor="operator", status="failed",
                                       reason="conflict in a.py")
    same()
    Outbox(tree.db_path).post_notice("main.parked", "a notice")
    same()
    entry = next(e for e in live.build(now=now).inbox if e.item.node == "main.ended")
    InboxStore(tree.db_path).ack(entry.item.key, entry.item.fingerprint)
    same()
    assert entry.item.key not in {e.item.key for e in live.build(now=now).inbox}


def test_a_read_right_behind_a_write_keeps_no_token_so_the_next_look_reads(
        repo: Path) -> None:
    import os
    import time

    from fractal.tree import find_tree
    from fractal.tui.snapshot import SETTLE_S, Builder

    tree = find_tree(repo)
    builder = Builder(tree)
    builder.build(force=True)
    files = list(tree.db_path.parent.glob(tree.db_path.name + "*"))

    def written(at: float | None) -> None:  # the db files' mtime: now (None) or ``at``
        for path in files:
            os.utime(path, None if at is None else (at, at))

    Ledger(tree.db_path).add_event("main.quiet", "note", actor="operator",
                                   status="completed", metadata="a write")
    written(None)
    builder.build()  # within SETTLE_S of the write: the commit may not be visible yet
    assert builder.settling and builder._token is None
    before = builder.last
    written(None)
    assert builder.build() is before  # it read again: nothing new, the same snapshot
    written(time.time() - 10 * SETTLE_S)
    builder.build()
    assert not builder.settling  # settled: this read's token is kept
    token = builder._token
    assert token is not None and builder.build() is builder.last


def test_a_write_during_a_read_keeps_no_token_so_the_next_look_sees_it(repo: Path) -> None:
    """A commit that lands while the builder reads (after its rows were taken, before the
    change token is) must not be taken as seen: the next look reads it."""
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder, Snapshot

    tree = find_tree(repo)
    builder = Builder(tree)
    builder.build(force=True)
    reading = builder._read
    late = {"done": False}

    def read_then_written(now: float, token: object) -> Snapshot:
        snap = reading(now, token)
        if not late["done"]:  # the heal of a dead supervisor, landing mid-read
            late["done"] = True
            force_status(tree.db_path, "main.quiet", "paused")
        return snap

    builder._read = read_then_written  # type: ignore[method-assign]
    before = builder.build(force=True)
    view = before.node("main.quiet")
    assert view is not None and view.status == "idle"  # the read missed it
    assert builder.settling and builder._token is None  # so it looks again soon
    shown = builder.build().node("main.quiet")
    assert shown is not None and shown.status == "paused"


def test_a_parent_waiting_on_a_child_nobody_started_is_an_inbox_item(cousins: Path) -> None:
    no_hold(cousins)  # its own loop's first otherwise (test_attention_route.py)
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a2", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2", "active")
    assert [i for i in _items(cousins) if i["kind"] == "unstarted"] == []  # not waiting yet
    ledger.open_step(node="main.a2", run_id=run, iter_id=None, step=4, step_name="WAIT",
                     agent=None, model=None, session=None)
    items = [i for i in _items(cousins) if i["kind"] == "unstarted"]
    assert len(items) == 1
    item = items[0]
    assert item["node"] == "main.a2" and item["command"] == "fractal node start main.a2.x"
    assert "1 child nobody has started (x)" in str(item["summary"])
    details = item["details"]
    assert isinstance(details, dict) and details["children"] == ["main.a2.x"]
    # Once the child has a run of its own, the item is gone.
    ledger.open_run("main.a2.x", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2.x", "active")
    assert [i for i in _items(cousins) if i["kind"] == "unstarted"] == []


def test_a_parent_waiting_on_its_childs_gate_is_not_a_stall(cousins: Path) -> None:
    """A node quiet for hours in a children wait (its child at a gate) is waiting, not
    stalled: the inbox offers no stall item (no `node attach`) and the dashboard's tree
    line carries no stall mark; the same silence outside a wait is one."""
    from fractal.tree import find_tree
    from fractal.tui.snapshot import Builder

    no_hold(cousins)
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a2", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a2", "active")
    wait = ledger.open_step(node="main.a2", run_id=run, iter_id=None, step=2,
                            step_name="WAIT", agent=None, model=None, session=None)
    child = ledger.open_run("main.a2.x", agent="stub", max_cost=None, parent_run_id=run)
    force_status(ledger.db_path, "main.a2.x", "active")
    ledger.open_step(node="main.a2.x", run_id=child, iter_id=None, step=1,
                     step_name="EXECUTE", agent="stub", model=None, session=None)
    long_ago = "2026-01-01T00:00:00.000Z"
    for table, column in (("runs", "started_at"), ("steps", "started_at"),
                          ("events", "created_at")):
        _sql(ledger.db_path, f"UPDATE {table} SET {column} = ? WHERE node = 'main.a2'",
                     long_ago)
    assert [i for i in _items(cousins) if i["kind"] == "stall"] == []
    view = Builder(find_tree(cousins)).build(force=True).node("main.a2")
    assert view is not None and not view.stalled
    # Without the wait, the same silence is a stall.
    _sql(ledger.db_path, "DELETE FROM steps WHERE step_id = ?", wait)
    stalls = [i for i in _items(cousins) if i["kind"] == "stall"]
    assert [i["node"] for i in stalls] == ["main.a2"]


def _sql(db: Path, statement: str, *params: object) -> None:
    """One write to the tree's database, as a test's setup."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        with con:
            con.execute(statement, params)
    finally:
        con.close()


def test_a_paused_item_shows_the_reason_the_pause_was_given(cousins: Path) -> None:
    no_hold(cousins)  # the operator's own pause: shown at once
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    force_status(ledger.db_path, "main.a1", "active")
    ledger.signal_run("main.a1", run, "pause", actor="operator", reason="lunch")
    force_status(ledger.db_path, "main.a1", "paused")
    ledger.add_event("main.a1", "pause", actor="loop", status="completed",
                     metadata="parked during PREPARE", run_id=run)
    items = [i for i in _items(cousins) if i["kind"] == "paused"]
    assert [i["summary"] for i in items] == ["paused: lunch (during PREPARE)"]
    details = items[0]["details"]
    assert isinstance(details, dict) and details["reason"] == "parked during PREPARE"


def test_an_exited_item_goes_once_the_nodes_work_is_merged(cousins: Path) -> None:
    ledger = Ledger(cousins / ".fractal" / "main" / "fractal.db")
    run = ledger.open_run("main.a1", agent="stub", max_cost=None, parent_run_id=None)
    ledger.close_run(run, "exited", 1, "Exited at iteration 1.1")
    force_status(ledger.db_path, "main.a1", "exited")
    assert [i["node"] for i in _items(cousins) if i["kind"] == "exited"] == ["main.a1"]
    a1 = cousins / ".worktrees" / "main.a1"
    (a1 / "work.txt").write_text("a1\n")
    git(a1, "add", "work.txt")
    git(a1, "commit", "-q", "-m", "a1 work")
    out = run_cli_as(cousins, "node", "merge", "a1", "--force")  # the user resolved it
    assert out.returncode == 0, out.stderr
    assert [i for i in _items(cousins) if i["kind"] == "exited"] == []
