"""``node activity --follow`` (fractal/lifecycle/reads/follow.py): the backlog oldest first,
then each row another writer adds, once, with no query while nothing changed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.lifecycle.context import open_context
from fractal.lifecycle.reads.follow import follow_activity
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import make_repo, wait_until
from tests.trees import run_cli


@pytest.fixture
def repo_tree(tmp_path: Path) -> Iterator[Path]:
    repo = make_repo(tmp_path / "repo")
    for args in (["init"], ["node", "init", "a"]):
        run_cli(args, repo)
    yield repo
    close_engines()


def test_follow_yields_backlog_then_new_rows_once(repo_tree: Path) -> None:
    ledger = Ledger(repo_tree / ".fractal" / "main" / "fractal.db")
    writes = iter(["one", "two", "", "three"])

    def sleep(_seconds: float) -> None:  # each look first lets "another writer" add a row
        name = next(writes, "")
        if name:
            ledger.add_event("main.a", "note", actor="operator", status="completed",
                             metadata=name)

    batches = list(follow_activity(open_context(repo_tree), None, 5, sleep=sleep, polls=5))
    assert [r["event"] for r in batches[0]] == ["init", "init"]
    later = [r["reason"] for batch in batches[1:] for r in batch]
    assert later == ["one", "two", "three"]
    assert all(batch for batch in batches[1:])  # a look that found nothing yields nothing


def test_a_row_landing_while_the_backlog_is_printed_is_followed(repo_tree: Path) -> None:
    """The generator is suspended at its first yield while the CLI prints the backlog; a
    row written then must come in the next look (it did not: the files' token was read
    after the yield, so it already held that row and no change was seen)."""
    ledger = Ledger(repo_tree / ".fractal" / "main" / "fractal.db")
    following = follow_activity(open_context(repo_tree), None, 5, sleep=lambda _s: None,
                                polls=1)
    assert [r["event"] for r in next(following)] == ["init", "init"]
    ledger.add_event("main.a", "note", actor="operator", status="completed", metadata="mid")
    assert [r["reason"] for batch in following for r in batch] == ["mid"]


def test_following_one_node_ends_once_its_run_is_over(repo_tree: Path) -> None:
    import sqlite3

    db = repo_tree / ".fractal" / "main" / "fractal.db"
    ledger = Ledger(db)

    def status(value: str) -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE nodes SET status = ? WHERE node = 'main.a'", (value,))

    status("active")
    looks: list[int] = []

    def sleep(_seconds: float) -> None:
        looks.append(1)
        if len(looks) == 1:
            ledger.add_event("main.a", "note", actor="loop", status="completed",
                             metadata="working")
        elif len(looks) == 2:  # the run ends: its last row and the settled status
            ledger.add_event("main.a", "note", actor="loop", status="completed",
                             metadata="last words")
            status("completed")

    batches = list(follow_activity(open_context(repo_tree), "a", 5, sleep=sleep, polls=50))
    assert [r["reason"] for batch in batches[1:] for r in batch] == ["working", "last words"]
    assert len(looks) == 2  # it stopped at the settling look, not after 50
    whole = list(follow_activity(open_context(repo_tree), None, 5, sleep=lambda _s: None,
                                 polls=3))
    assert len(whole) == 1  # the whole tree: followed until the caller stops (3 looks here)


def test_follow_cli_streams_json_lines_until_interrupted(repo_tree: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "fractal", "node", "activity", "--follow",
                             "--json"], cwd=repo_tree, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "init"
        ledger = Ledger(repo_tree / ".fractal" / "main" / "fractal.db")
        ledger.add_event("main.a", "note", actor="operator", status="completed",
                         metadata="later")
        line = wait_until(lambda: json.loads(proc.stdout.readline()) if proc.stdout else None,
                          timeout=20, message="a streamed row")
        while line["event"] != "note":
            line = json.loads(proc.stdout.readline())
        assert line["reason"] == "later"
    finally:
        proc.send_signal(2)
        assert proc.wait(timeout=10) == 0
