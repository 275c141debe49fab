"""The worker pools' state on a real tree database: claims within the width, exact
attempts through failure, review and resume, and dispatchers in separate processes
racing for the same items without ever claiming one twice."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from fractal.domain.pool import ItemStatus, PoolRefused
from fractal.errors import FractalError
from fractal.store.pool import PoolStore

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

ITEMS = [(f"i{n}", f"input {n}") for n in range(9)]


def worker_of(item_id: str) -> str:
    return f"main.pool.{item_id}"


def test_claims_stay_within_the_width_and_follow_file_order(tmp_path: Path) -> None:
    store = PoolStore(tmp_path / "fractal.db")
    assert store.create_pool("main.pool", "brief", 3, ITEMS) == 3
    claimed = [store.claim_next("main.pool", worker_of) for _ in range(4)]
    assert [c.item_id if c else None for c in claimed] == ["i0", "i1", "i2", None]
    assert all(c is None or (c.attempts, c.worker) == (1, worker_of(c.item_id))
               for c in claimed)
    store.finish("main.pool", "i0", "made it")
    nxt = store.claim_next("main.pool", worker_of)
    assert nxt is not None and nxt.item_id == "i3"
    with pytest.raises(FractalError, match="already exists"):
        store.create_pool("main.pool", "brief", 3, ITEMS)


def test_a_whole_item_life_counts_attempts_exactly(tmp_path: Path) -> None:
    store = PoolStore(tmp_path / "fractal.db")
    store.create_pool("main.pool", "brief", 1, [("a", "x"), ("b", "y")])
    assert store.claim_next("main.pool", worker_of).item_id == "a"  # type: ignore[union-attr]
    assert store.fail("main.pool", "a", "exited: boom").status is ItemStatus.OPEN
    again = store.claim_next("main.pool", worker_of)
    assert again is not None and (again.item_id, again.attempts) == ("a", 2)
    failed = store.fail("main.pool", "a", "exited: boom again")
    assert (failed.status, failed.attempts, failed.result) == (
        ItemStatus.FAILED, 2, "exited: boom again")
    assert store.claim_next("main.pool", worker_of).item_id == "b"  # type: ignore[union-attr]
    store.finish("main.pool", "b", "ok")
    assert store.mark_reviewed("main.pool") and not store.mark_reviewed("main.pool")
    rejected = store.reject("main.pool", "b", "not the brief")
    assert (rejected.status, rejected.attempts) == (ItemStatus.OPEN, 1)
    assert store.claim_next("main.pool", worker_of).attempts == 2  # type: ignore[union-attr]
    with pytest.raises(PoolRefused, match="item a: it is failed"):
        store.finish("main.pool", "a", "late")
    with pytest.raises(FractalError, match="no item 'zz'"):
        store.finish("main.pool", "zz", "x")
    assert store.pool("main.pool") == ("brief", 1, True)


def test_resume_reopens_claims_without_a_live_worker(tmp_path: Path) -> None:
    store = PoolStore(tmp_path / "fractal.db")
    store.create_pool("main.pool", "brief", 4, [("a", "x"), ("b", "y"), ("c", "z")])
    for _ in range(3):
        store.claim_next("main.pool", worker_of)
    store.fail("main.pool", "c", "boom")
    store.claim_next("main.pool", worker_of)  # c again: attempts 2
    changed = store.resume("main.pool", alive=lambda worker: worker.endswith(".b"))
    assert {(i.item_id, i.status, i.attempts, i.result) for i in changed} == {
        ("a", ItemStatus.OPEN, 1, ""), ("c", ItemStatus.FAILED, 2, "interrupted")}
    assert [i.status for i in store.items("main.pool")] == [
        ItemStatus.OPEN, ItemStatus.CLAIMED, ItemStatus.FAILED]


def _dispatch(db: str, name: str, queue: multiprocessing.Queue[tuple[str, str]]) -> None:
    store = PoolStore(Path(db))
    while True:
        item = store.claim_next("main.pool", lambda item_id: f"{name}:{item_id}")
        if item is None:
            return
        queue.put((item.item_id, name))
        store.finish("main.pool", item.item_id, f"by {name}")


def test_racing_dispatchers_never_claim_an_item_twice(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    PoolStore(db).create_pool("main.pool", "brief", 6, ITEMS * 1 + [
        (f"j{n}", "more") for n in range(21)])
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[tuple[str, str]] = ctx.Queue()
    procs = [ctx.Process(target=_dispatch, args=(str(db), f"d{n}", queue)) for n in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    claims = []
    while not queue.empty():
        claims.append(queue.get())
    ids = [item_id for item_id, _ in claims]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 30
    items = PoolStore(db).items("main.pool")
    assert all(i.status is ItemStatus.DONE and i.attempts == 1 for i in items)
