"""The pool verbs on real git and a real tree database: ``node pool`` creation, the
dispatcher's round (a done worker merged and finished, a failed one reopened, a claim
whose worker never ran put back by the resume rule, the width), two dispatchers racing,
``pool result`` and ``pool reject`` with who may run them.

Starting a worker hosts a supervisor in tmux; here the starter is replaced by a fake that
records which item it was asked to start at which attempt (the e2e test starts real ones).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fractal.domain.pool import Item, ItemStatus
from fractal.errors import FractalError, InvalidValue
from fractal.lifecycle import pool as poolverbs
from fractal.lifecycle.context import Context, open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store.pool import PoolStore
from fractal.tree import Tree
from tests.helpers import copy_of_tree, git, make_repo

BRIEF = "Write out/<id>.txt.\n"


@dataclass
class Starts:
    """The fake starter: records (item, attempt) for every start it is asked for."""

    calls: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, ctx: Context, pool: str, brief: str, item: Item, config: object,
                 previous: str) -> str | None:
        with self.lock:
            self.calls.append((item.item_id, item.attempts))
        return None


@dataclass
class Setup:
    repo: Path
    tree: Tree
    store: PoolStore
    starts: Starts

    @property
    def pool_dir(self) -> Path:
        return self.tree.node("main.p").node_dir

    def ctx(self) -> Context:
        """The context of a command run now at the repository (``_NODE`` read now)."""
        return open_context(self.repo)

    def items(self) -> dict[str, Item]:
        return {i.item_id: i for i in self.store.items("main.p")}

    def worker_ran(self, item: str, status: str, *, commit: str | None = None) -> None:
        """Make ``main.p.<item>`` a worker whose run ended ``status`` now."""
        branch = f"main.p.{item}"
        if not self.tree.node(branch).worktree.exists():
            init_node(open_context(self.tree.node("main.p").worktree), item, {},
                      parent="main.p")
        if commit is not None:
            wt = self.tree.node(branch).worktree
            (wt / "out").mkdir(exist_ok=True)
            (wt / "out" / f"{item}.txt").write_text(commit + "\n")
            git(wt, "add", "-A")
            git(wt, "commit", "-q", "-m", commit)
        con = sqlite3.connect(self.tree.db_path)
        try:
            with con:
                con.execute("INSERT INTO runs (node, status, exit_code, metadata, started_at,"
                            " ended_at) VALUES (?, ?, 0, ?, strftime('%Y-%m-%dT%H:%M:%fZ'),"
                            " strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+1 second'))",
                            (branch, status, f"run {status}"))
                con.execute("UPDATE nodes SET status = ? WHERE node = ?", (status, branch))
        finally:
            con.close()


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo)
    poolverbs.create_pool(open_context(repo), "p", "a\nb\nc\n", BRIEF, 2, {"title": "the pool"})


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    """The pool ``main.p`` (items a, b, c; two at a time), made once per test process and
    copied; its starts are recorded, not made."""
    repo = copy_of_tree(tmp_path / "repo", "pool-p", _build)
    tree = Tree(repo=repo, root="main")
    starts = Starts()
    monkeypatch.setattr(poolverbs, "_try_start", starts)
    monkeypatch.setenv("_NODE", str(tree.node("main.p").node_dir))  # the pool's own loop
    return Setup(repo, tree, PoolStore(tree.db_path), starts)


def test_node_pool_makes_a_pool_node(setup: Setup) -> None:
    steps = sorted(p.name for p in (setup.pool_dir / "steps").iterdir())
    assert steps == ["00-DISPATCH.md", "01-REVIEW.md"]
    assert (setup.pool_dir / "worker-steps" / "00-WORK.md").is_file()
    assert setup.store.pool("main.p") == (BRIEF, 2, False)
    assert [(i.item_id, i.input, i.status) for i in setup.items().values()] == [
        ("1", "a", ItemStatus.OPEN), ("2", "b", ItemStatus.OPEN), ("3", "c", ItemStatus.OPEN)]
    assert "main.p: pool steps" in git(setup.repo, "log", "--format=%s", "main.p")


def test_a_bad_items_file_creates_nothing(setup: Setup) -> None:
    with pytest.raises(InvalidValue, match="items file"):
        poolverbs.create_pool(setup.ctx(), "q", '[{"id": "x"}]', BRIEF, None, {})
    assert not setup.tree.node("main.q").worktree.exists()
    assert setup.store.pool("main.q") is None


def test_a_round_claims_to_the_width_then_lands_a_done_worker(setup: Setup) -> None:
    first = poolverbs.dispatch(setup.ctx())
    assert first.next == "wait"
    assert setup.starts.calls == [("1", 1), ("2", 1)]  # two slots, claims in file order
    assert setup.items()["3"].status is ItemStatus.OPEN

    setup.worker_ran("1", "running", commit="item 1 done")  # not yet settled...
    setup.worker_ran("1", "completed")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("_NODE", str(setup.tree.node("main.p.1").node_dir))
        poolverbs.report(setup.ctx(), "wrote   item 1\n")  # one line, as the worker
    second = poolverbs.dispatch(setup.ctx())
    items = setup.items()
    assert (items["1"].status, items["1"].attempts, items["1"].result) == (
        ItemStatus.DONE, 1, "wrote item 1")
    assert "out/1.txt" in git(setup.repo, "ls-tree", "-r", "--name-only", "main.p")
    assert setup.starts.calls[-1] == ("3", 1)  # the freed slot
    assert second.next == "wait" and any("merged" in n for n in second.notes)


def test_without_a_reported_line_the_last_commit_subject_is_the_result(setup: Setup) -> None:
    poolverbs.dispatch(setup.ctx())
    setup.worker_ran("1", "completed", commit="the subject of item 1")
    poolverbs.dispatch(setup.ctx())
    assert setup.items()["1"].result == "the subject of item 1"


def test_a_worker_without_a_commit_of_its_own_reports_no_inherited_subject(
        setup: Setup) -> None:
    poolverbs.dispatch(setup.ctx())
    setup.worker_ran("1", "completed")  # completed, wrote no line and made no commit
    poolverbs.dispatch(setup.ctx())
    item = setup.items()["1"]
    assert (item.status, item.result) == (ItemStatus.DONE, "done")


def test_a_failed_worker_gets_one_more_attempt_then_fails(setup: Setup) -> None:
    poolverbs.dispatch(setup.ctx())
    setup.worker_ran("1", "exited")
    poolverbs.dispatch(setup.ctx())
    assert (setup.items()["1"].status, setup.items()["1"].attempts) == (ItemStatus.CLAIMED, 2)
    assert ("1", 2) in setup.starts.calls
    setup.worker_ran("1", "exited")
    poolverbs.dispatch(setup.ctx())
    item = setup.items()["1"]
    assert (item.status, item.attempts, item.result) == (ItemStatus.FAILED, 2,
                                                         "exited: run exited")


def test_a_claim_whose_worker_never_ran_follows_the_resume_rule(setup: Setup) -> None:
    poolverbs.dispatch(setup.ctx())  # claims 1 and 2; the fake never starts them
    poolverbs.dispatch(setup.ctx())  # another round leaves them to their dispatcher
    assert setup.starts.calls == [("1", 1), ("2", 1)]
    poolverbs.dispatch(setup.ctx(), resume=True)  # as after it died: reopened, claimed again
    items = setup.items()
    assert (items["1"].status, items["1"].attempts) == (ItemStatus.CLAIMED, 2)
    assert setup.starts.calls.count(("1", 2)) == 1
    poolverbs.dispatch(setup.ctx(), resume=True)  # never ran, at the last attempt
    items = setup.items()
    assert (items["1"].status, items["1"].result) == (ItemStatus.FAILED, "interrupted")
    assert items["1"].attempts == 2


def test_two_dispatchers_racing_claim_each_item_once(setup: Setup) -> None:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def one() -> None:
        barrier.wait()
        try:
            poolverbs.dispatch(setup.ctx())
        except BaseException as exc:  # a failure in a thread must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(setup.starts.calls) == [("1", 1), ("2", 1)]


def test_review_then_end(setup: Setup) -> None:
    poolverbs.dispatch(setup.ctx())
    for item in ("1", "2"):
        setup.worker_ran(item, "completed", commit=f"item {item}")
    poolverbs.dispatch(setup.ctx())
    setup.worker_ran("3", "completed", commit="item 3")
    assert poolverbs.dispatch(setup.ctx()).next == "review"
    assert setup.store.pool("main.p") == (BRIEF, 2, True)
    rejected = poolverbs.reject(setup.ctx(), "2", "too short")
    assert (rejected.status, rejected.attempts) == (ItemStatus.OPEN, 1)
    assert poolverbs.dispatch(setup.ctx()).next == "wait"
    assert setup.starts.calls[-1] == ("2", 2)
    setup.worker_ran("2", "completed", commit="item 2 again")
    end = poolverbs.dispatch(setup.ctx())
    assert (end.next, end.reason) == ("end", "pool: 3 done, 0 failed")


def test_who_may_reject_and_report(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    poolverbs.dispatch(setup.ctx())
    setup.worker_ran("1", "completed", commit="item 1")
    poolverbs.dispatch(setup.ctx())
    with pytest.raises(FractalError, match="only a done item"):
        poolverbs.reject(setup.ctx(), "2", "no")
    monkeypatch.delenv("_NODE")
    init_node(setup.ctx(), "other", {})
    monkeypatch.setenv("_NODE", str(setup.tree.node("main.other").node_dir))
    with pytest.raises(FractalError, match="may not reject"):
        poolverbs.reject(setup.ctx(), "1", "no", pool="p")
    with pytest.raises(FractalError, match="not a pool worker"):
        poolverbs.report(setup.ctx(), "I am no worker")
    monkeypatch.delenv("_NODE")
    assert poolverbs.reject(setup.ctx(), "1", "no", pool="p").status is ItemStatus.OPEN
    with pytest.raises(FractalError, match="not a pool node"):
        poolverbs.dispatch(setup.ctx())  # the operator is no pool's loop


def test_pool_progress_reads_the_counts_read_only(setup: Setup, tmp_path: Path) -> None:
    from fractal.store.pool import pool_progress

    poolverbs.dispatch(setup.ctx())
    setup.worker_ran("1", "completed", commit="item 1")
    poolverbs.dispatch(setup.ctx())
    assert pool_progress(setup.tree.db_path) == {"main.p": (1, 0, 2, 3)}
    assert pool_progress(tmp_path / "missing.db") == {}


def test_a_deleted_pools_name_can_be_used_again(setup: Setup, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    from fractal.lifecycle.cleanup.delete import delete

    monkeypatch.delenv("_NODE")
    delete(setup.ctx(), "p")
    poolverbs.create_pool(setup.ctx(), "p", "x\n", BRIEF, None, {})
    assert [i.input for i in setup.items().values()] == ["x"]
    con = sqlite3.connect(setup.tree.db_path)
    try:
        kept = con.execute("SELECT pool, COUNT(*) FROM pool_items WHERE pool LIKE 'main.p@%' "
                           "GROUP BY pool").fetchall()
    finally:
        con.close()
    assert len(kept) == 1 and kept[0][1] == 3  # the old items, on record
