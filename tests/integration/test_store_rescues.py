"""store/rescues.py and lifecycle/rescuing.py: a rescue ref is booked with its files, and
the listing joins the refs (which outlive the database) with their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fractal.lifecycle.rescuing import list_rescues, record_rescue, rescue_node
from fractal.store.rescues import RescueBook
from fractal.tree import Tree
from fractal.workspace.rescue import rescue_branch
from fractal.workspace.worktrees import add_worktree
from tests import ledgersql

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses


def _tree(repo: Path) -> Tree:
    data = repo / ".fractal" / "main"
    data.mkdir(parents=True)
    (data / "config.json").write_text(json.dumps({"user": True}))
    tree = Tree(repo=repo, root="main")
    RescueBook(tree.db_path, create=True)  # as `fractal init` makes it: no other verb does
    return tree


def test_record_and_read_back(tmp_path: Path) -> None:
    book = RescueBook(tmp_path / "fractal.db")
    rid = book.record_rescue(node="main.a", operation="delete", ref="refs/fractal/rescue/x/1",
                             sha="a" * 40, tip="b" * 40, files=["with space.txt", "line\nbreak"],
                             actor="operator", created_at="2026-12-01T10:15:03.123Z")
    [row] = book.rescues("main.a")
    assert row.rescue_id == rid and row.files == ("with space.txt", "line\nbreak")
    assert (row.operation, row.actor, row.created_at) == ("delete", "operator",
                                                          "2026-12-01T10:15:03.123Z")
    assert book.rescues("main.b") == []


def test_rescue_node_books_a_row_and_an_event_and_lists_it(repo: Path) -> None:
    tree = _tree(repo)
    wt = repo / ".worktrees" / "main.a"
    add_worktree(repo, "main.a", wt, "main")
    (wt / "unsaved.txt").write_text("x\n")
    saved = rescue_node(tree, "main.a", "delete", actor="operator")
    [row] = RescueBook(tree.db_path).rescues()
    assert (row.ref, row.sha, row.files) == (saved.ref, saved.sha, ("unsaved.txt",))
    with ledgersql.connect(tree.db_path) as conn:
        events = conn.execute("SELECT event, status, metadata FROM events").fetchall()
    assert events == [("rescue", "completed", f"delete: {saved.ref} (1 file(s))")]
    [listed] = list_rescues(repo)
    assert (listed.node, listed.operation, listed.files) == ("main.a", "delete", 1)


def test_a_ref_without_a_row_is_still_listed(repo: Path) -> None:
    tree = _tree(repo)
    orphan = rescue_branch(repo, "main", "destroy")
    booked = rescue_branch(repo, "main", "reset")
    record_rescue(tree, booked, actor="operator")
    listed = {r.ref: r for r in list_rescues(repo)}
    # no row: the operation and file count are read from the rescue commit itself
    assert (listed[orphan.ref].operation, listed[orphan.ref].files) == ("destroy", 0)
    assert listed[booked.ref].operation == "reset"
