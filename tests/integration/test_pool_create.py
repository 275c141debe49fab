"""``node pool`` is resumable: a pool whose items could not be recorded (the database
locked at that moment) leaves an idle node that says so, and the same command run again
records the items on it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.domain.pool import ItemStatus
from fractal.errors import FractalError, StoreError
from fractal.lifecycle import pool as poolverbs
from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store.engine import close_engines
from fractal.store.pool import PoolStore
from tests.helpers import make_repo

BRIEF = "Write out/<id>.txt.\n"


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    return repo


def _locked_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the next pool-row write fail as a locked database does; return the pools it
    refused."""
    refused: list[str] = []
    real = PoolStore.create_pool

    def locked(self: PoolStore, pool: str, *args: object, **kwargs: object) -> int:
        if not refused:
            refused.append(pool)
            raise StoreError(f"database {self.db_path} is locked by another process; "
                             "nothing was written; try again once it lets go")
        return real(self, pool, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PoolStore, "create_pool", locked)
    return refused


def _nodes(repo: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as db:
        return db.execute("SELECT node, status FROM nodes ORDER BY node").fetchall()


def test_a_pool_refused_on_a_locked_database_is_finished_by_a_rerun(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refused = _locked_once(monkeypatch)
    with pytest.raises(FractalError, match="items were not recorded") as err:
        poolverbs.create_pool(open_context(repo), "p", "a\nb\n", BRIEF, 2, {})
    assert refused == ["main.p"]
    assert "run the same `fractal node pool` command again" in str(err.value)
    assert "locked" in str(err.value)
    assert _nodes(repo) == [("main.p", "idle")]  # kept, idle, without items
    assert PoolStore(repo / ".fractal" / "main" / "fractal.db").pool("main.p") is None
    _worktree, branch, width, count = poolverbs.create_pool(
        open_context(repo), "p", "a\nb\n", BRIEF, 2, {})
    assert (branch, width, count) == ("main.p", 2, 2)
    view = poolverbs.pool_view(open_context(repo), "p")
    assert [(i.input, i.status) for i in view.items] == [("a", ItemStatus.OPEN),
                                                         ("b", ItemStatus.OPEN)]
    assert _nodes(repo) == [("main.p", "idle")]  # no second node


def test_a_rerun_never_adopts_a_node_that_is_no_half_made_pool(repo: Path) -> None:
    init_node(open_context(repo), "p", {"max_cost": 1.0})  # an ordinary node named p
    with pytest.raises(FractalError, match="exists"):
        poolverbs.create_pool(open_context(repo), "p", "a\n", BRIEF, None, {})
    assert PoolStore(repo / ".fractal" / "main" / "fractal.db").pool("main.p") is None


def test_a_complete_pool_is_not_created_twice(repo: Path) -> None:
    poolverbs.create_pool(open_context(repo), "p", "a\n", BRIEF, None, {})
    with pytest.raises(FractalError, match="exists"):
        poolverbs.create_pool(open_context(repo), "p", "a\n", BRIEF, None, {})


def test_a_pool_whose_items_were_not_recorded_is_not_started(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Started, its DISPATCH step failed every iteration and the run left the node
    ``exited``, where the rerun of ``node pool`` refused it (``node main.p already
    exists``): the documented way on was lost. Refused before anything changes, the
    rerun still completes it."""
    from fractal.lifecycle.start.node import start_node

    _locked_once(monkeypatch)
    with pytest.raises(FractalError, match="items were not recorded"):
        poolverbs.create_pool(open_context(repo), "p", "a\nb\n", BRIEF, 2, {})
    with pytest.raises(FractalError, match=r"no items recorded.*fractal node pool p"):
        start_node(open_context(repo), "p")
    assert _nodes(repo) == [("main.p", "idle")]
    with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
    poolverbs.create_pool(open_context(repo), "p", "a\nb\n", BRIEF, 2, {})
    assert _nodes(repo) == [("main.p", "idle")]
