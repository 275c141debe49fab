"""Host-local facts in a shared ledger: worktrees recorded relative to the clone (and the
migration that makes older rows so), and a node another host owns (``nodes.host``) never
signalled, healed or judged missing from here: ``node kill`` refuses it naming the host,
a stop still goes through the ledger and says where its supervisor runs, ``node status``
reports it. On both backends."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from alembic import command

from fractal.domain.signals import Signal
from fractal.domain.states import Move, Status
from fractal.errors import FractalError
from fractal.lifecycle.context import Context, Refused, open_context
from fractal.lifecycle.doctor import doctor
from fractal.lifecycle.reads.nodes import list_nodes, node_status
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.start.node import start_node
from fractal.lifecycle.steering.kill import kill
from fractal.lifecycle.steering.resume import resume_node
from fractal.lifecycle.steering.signal import send
from fractal.lifecycle.trees import init_tree
from fractal.store.backend import this_host
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from tests import ledgersql
from tests.helpers import copy_of_tree, make_repo, pid_alive

pytestmark = pytest.mark.backend

NODE = "main.a"
OTHER = "build-07"  # a host that is not this one


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo, agent="true")
    init_node(open_context(repo, {}), "a", {})


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    """``main`` with one child ``main.a``."""
    return Tree(repo=copy_of_tree(tmp_path / "repo", "hosts-one-child", _build), root="main")


def _ctx(tree: Tree) -> Context:
    return open_context(tree.repo, {})


def _elsewhere(tree: Tree, node: str = NODE) -> None:
    ledgersql.rows(tree.db_path, "UPDATE nodes SET host = ? WHERE node = ? RETURNING node",
                   OTHER, node)


def _active_under(tree: Tree, pid: int, started: float) -> int:
    """Make ``main.a`` active with an open run under the supervisor ``pid``; its run id."""
    ledger = Ledger(tree.db_path)
    assert ledger.move(NODE, Move.START, supervisor=(pid, started)).ok
    return ledger.open_run(NODE, agent="true", max_cost=None, parent_run_id=None)


# ---- worktrees relative to the clone ----------------------------------------------------


def test_a_node_records_its_worktree_relative_to_the_clone(tree: Tree) -> None:
    (stored,), = ledgersql.rows(tree.db_path, "SELECT worktree FROM nodes WHERE node = ?", NODE)
    assert stored == ".worktrees/main.a"
    assert tree.worktree_at(str(stored)) == tree.repo / ".worktrees" / "main.a"
    elsewhere = Tree(repo=Path("/srv/clone"), root="main")
    assert elsewhere.worktree_at(str(stored)) == Path("/srv/clone/.worktrees/main.a")


def test_an_old_absolute_row_still_reads_and_a_missing_check_uses_it(tree: Tree) -> None:
    moved = tree.repo.parent / "kept-beside"
    (tree.repo / ".worktrees" / NODE).rename(moved)
    ledgersql.rows(tree.db_path, "UPDATE nodes SET worktree = ? WHERE node = ? RETURNING node",
                   str(moved), NODE)
    assert tree.worktree_at(str(moved)) == moved
    assert node_status(_ctx(tree), "a").status == Status.IDLE.value  # found where the row says


def _alembic(tree: Tree) -> object:
    from alembic.config import Config

    from fractal.store import pgschema
    from fractal.store.schema import alembic_config, migrations_dir

    url = os.environ.get("FRACTAL_DATABASE_URL")
    if url is None:
        return alembic_config(tree.db_path)
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", pgschema.sqlalchemy_url(url))
    return cfg


def test_migration_0018_makes_absolute_worktrees_relative(tree: Tree) -> None:
    cfg = _alembic(tree)
    command.downgrade(cfg, "0017")  # type: ignore[arg-type]
    rows = [("main.b", "/home/me/repo/.worktrees/main.b"),  # the layout: made relative
            ("main.c", "/home/me/elsewhere/main.c"),  # kept beside: stays absolute
            ("main.d", None)]
    for node, worktree in rows:
        ledgersql.rows(tree.db_path, "INSERT INTO nodes (node, parent, worktree, status, "
                       "created_at) VALUES (?, 'main', ?, 'idle', '2026-12-07T00:00:00Z') "
                       "RETURNING node", node, worktree)
    command.upgrade(cfg, "head")  # type: ignore[arg-type]
    got = ledgersql.rows(tree.db_path, "SELECT node, worktree FROM nodes WHERE node IN "
                         "('main.b', 'main.c', 'main.d') ORDER BY node")
    assert got == [("main.b", ".worktrees/main.b"), ("main.c", "/home/me/elsewhere/main.c"),
                   ("main.d", None)]


# ---- another host's node ---------------------------------------------------------------


def test_kill_refuses_another_hosts_node_naming_the_host_and_signals_nothing(
        tree: Tree) -> None:
    # A live process here with the recorded pid: a kill from here would have reaped it.
    me = psutil.Process()
    _active_under(tree, me.pid, me.create_time())
    _elsewhere(tree)
    with pytest.raises(Refused) as refused:
        kill(_ctx(tree), "a")
    message = str(refused.value)
    assert f"runs on host {OTHER}" in message and this_host() in message
    assert f"`fractal node kill {NODE}` on {OTHER}" in message and "node stop" in message
    assert pid_alive(me.pid)
    assert ledgersql.rows(tree.db_path, "SELECT status FROM nodes WHERE node = ?", NODE) == [
        ("active",)]
    (status, meta), = ledgersql.rows(tree.db_path, "SELECT status, metadata FROM events "
                                     "WHERE node = ? AND event = 'kill'", NODE)
    assert status == "failed" and OTHER in meta


def test_a_stop_of_another_hosts_node_goes_through_the_ledger_and_says_where(
        tree: Tree) -> None:
    run = _active_under(tree, 999_999, 1.0)  # no such process here: not healed either
    _elsewhere(tree)
    sent, = send(_ctx(tree), "a", Signal.STOP)
    assert sent.ok and f"runs on host {OTHER}" in sent.message
    assert ledgersql.rows(tree.db_path, "SELECT signal FROM signals WHERE run_id = ?",
                          run) == [("stop",)]
    assert ledgersql.rows(tree.db_path, "SELECT status FROM nodes WHERE node = ?", NODE) == [
        ("active",)]


def test_status_and_list_report_another_hosts_node_without_healing_or_judging_it(
        tree: Tree) -> None:
    _active_under(tree, 999_999, 1.0)  # dead here: this host would heal its own
    _elsewhere(tree)
    (tree.repo / ".worktrees" / NODE / ".git").unlink()  # not in this clone's checkout
    got = node_status(_ctx(tree), "a")
    assert got.status == Status.ACTIVE.value
    assert f"on host {OTHER}" in got.detail and f"on {OTHER}" in got.detail
    assert {n["node"]: n["status"] for n in list_nodes(_ctx(tree), None)}[NODE] == "active"
    assert ledgersql.rows(tree.db_path, "SELECT count(*) FROM events WHERE node = ? AND "
                          "event IN ('heal', 'orphan', 'pause')", NODE) == [(0,)]


def test_a_settled_node_of_another_host_is_not_marked_missing_here(tree: Tree) -> None:
    _elsewhere(tree)
    (tree.repo / ".worktrees" / NODE / ".git").unlink()
    assert node_status(_ctx(tree), "a").status == Status.IDLE.value
    ledgersql.rows(tree.db_path, "UPDATE nodes SET host = ? WHERE node = ? RETURNING node",
                   this_host(), NODE)
    assert node_status(_ctx(tree), "a").status == Status.MISSING.value


def test_start_and_resume_refuse_another_hosts_node_naming_the_host(tree: Tree) -> None:
    _elsewhere(tree)
    with pytest.raises(FractalError) as refused:
        start_node(_ctx(tree), "a")
    message = str(refused.value)
    assert f"belongs to host {OTHER}" in message and this_host() in message
    assert f"`fractal node start {NODE}` on {OTHER}" in message
    assert ledgersql.rows(tree.db_path, "SELECT status FROM nodes WHERE node = ?", NODE) == [
        ("idle",)]

    run = _active_under(tree, 999_999, 1.0)
    ledgersql.rows(tree.db_path, "UPDATE nodes SET status = 'paused' WHERE node = ? "
                   "RETURNING node", NODE)
    resumed = resume_node(tree, Ledger(tree.db_path), NODE, actor="operator")
    assert not resumed.ok
    assert f"`fractal node resume {NODE}` on {OTHER}" in resumed.message
    assert ledgersql.rows(tree.db_path, "SELECT status FROM nodes WHERE node = ?", NODE) == [
        ("paused",)]
    (status, meta), = ledgersql.rows(tree.db_path, "SELECT status, metadata FROM events "
                                     "WHERE node = ? AND event = 'resume'", NODE)
    assert status == "failed" and OTHER in meta
    assert run > 0


def test_doctor_leaves_another_hosts_node_to_that_host(tree: Tree) -> None:
    _elsewhere(tree)
    (tree.repo / ".worktrees" / NODE / ".git").unlink()  # not in this clone's checkout
    assert doctor(tree.repo).findings == ()
