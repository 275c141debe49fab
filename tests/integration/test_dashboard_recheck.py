"""A stall is a state of the clock: with no database write, the dashboard's plain build
keeps its snapshot, and the periodic forced build (the build loop forces one every
RECHECK_S) shows the stall a dashboard opened fresh would show. Real SQLite."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.tree import find_tree
from fractal.tui.app import RECHECK_S, REFRESH_S
from fractal.tui.snapshot import Builder
from tests.helpers import force_status, make_repo, wait_until
from tests.trees import run_cli


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    repo = make_repo(tmp_path / "repo")
    for args in (["init"], ["node", "init", "st"]):
        assert run_cli(args, repo, check=False).returncode == 0
    yield repo
    close_engines()


def test_a_forced_build_shows_a_stall_no_write_announced(repo: Path) -> None:
    tree = find_tree(repo)
    ledger = Ledger(tree.db_path)
    run = ledger.open_run("main.st", agent="stub", max_cost=None, parent_run_id=None)
    ledger.open_step(node="main.st", run_id=run, iter_id=None, step=1, step_name="PREPARE",
                     agent=None, model=None, session=None)
    force_status(tree.db_path, "main.st", "active")
    builder = Builder(tree)
    start = time.time()
    wait_until(lambda: (builder.build(now=start), not builder.settling)[1], timeout=10,
               message="the last write settled")
    first = builder.build(now=start)
    assert [e.item.kind.value for e in first.inbox] == []
    later = start + 6 * 60  # six quiet minutes: past the 5-minute stall floor
    assert builder.build(now=later) is first  # nothing written: the plain build keeps it
    rechecked = builder.build(force=True, now=later)
    assert [(e.item.kind.value, e.item.node) for e in rechecked.inbox] == [
        ("stall", "main.st")]
    view = rechecked.node("main.st")
    assert view is not None and view.stalled
    assert REFRESH_S < RECHECK_S <= 60  # modest: well inside the stall floor
