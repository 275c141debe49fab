"""A verb's wake through a PostgreSQL ledger (``control.wake_node`` notifies the tree's
channel, ``store/wakes.py``) reaching a supervisor's listening ``Waker`` when the node's
``.wake`` file is out of the verb's reach (another clone, another host); a SQLite tree
has no channel."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fractal.control import wake_node
from fractal.runtime.waker import Waker
from fractal.store import wakes
from fractal.tree import Tree
from tests import ledgersql
from tests.helpers import wait_until

pytestmark = pytest.mark.backend

NODE = "main.a"
WAIT = 10.0  # far past the 1 s a wake may take: a wait that ends sooner was woken


def _postgres() -> None:
    if ledgersql.backend() != "postgres":
        pytest.skip("the wake channel is a PostgreSQL ledger's (run with --backend=both)")


@pytest.fixture
def here(tmp_path: Path) -> Tree:
    """The supervisor's clone."""
    return Tree(repo=tmp_path / "here", root="main")


@pytest.fixture
def elsewhere(tmp_path: Path) -> Tree:
    """The verb's clone: no node dir of ``NODE`` there, so its wake file cannot be
    touched (as on another host)."""
    return Tree(repo=tmp_path / "elsewhere", root="main")


def test_a_verb_from_another_clone_wakes_the_listening_supervisor_within_a_second(
        here: Tree, elsewhere: Tree) -> None:
    _postgres()
    waker = Waker()
    assert waker.listen(here.db_path, here.root, NODE)
    try:
        started = time.monotonic()
        wake_node(elsewhere, NODE)
        assert waker.wait(WAIT, poll=WAIT)
        assert time.monotonic() - started < 1.0
        assert not elsewhere.node(NODE).node_dir.exists()
    finally:
        waker.close()


def test_another_nodes_wake_does_not_wake_it(here: Tree, elsewhere: Tree) -> None:
    _postgres()
    waker = Waker()
    assert waker.listen(here.db_path, here.root, NODE)
    try:
        wake_node(elsewhere, "main.b")
        assert not waker.wait(0.3, poll=0.3)
        wake_node(elsewhere, "main.b", NODE)
        assert waker.wait(WAIT, poll=WAIT)
    finally:
        waker.close()


def test_a_lost_session_is_opened_again_and_hears_the_next_wake(
        here: Tree, elsewhere: Tree) -> None:
    _postgres()
    waker = Waker()
    assert waker.listen(here.db_path, here.root, NODE)
    listen = f'LISTEN "{wakes.channel(here.root)}"'

    def sessions() -> list[tuple[int, ...]]:
        return ledgersql.rows(here.db_path, "SELECT pid FROM pg_stat_activity WHERE query = ? "
                              "AND datname = current_database()", listen)

    try:
        (pid,), = wait_until(sessions, timeout=10, message="the LISTEN session")
        ledgersql.rows(here.db_path, "SELECT pg_terminate_backend(?::int)", pid)
        assert waker.wait(WAIT, poll=WAIT)  # the new session's first wake (may have missed one)
        wait_until(lambda: [s for s in sessions() if s != (pid,)], timeout=10,
                   message="a new LISTEN session")
        waker.wait(0.0)
        wake_node(elsewhere, NODE)
        assert waker.wait(WAIT, poll=WAIT)
    finally:
        waker.close()


def test_a_sqlite_tree_has_no_channel_to_listen_on(here: Tree) -> None:
    if ledgersql.backend() != "sqlite":
        pytest.skip("a SQLite ledger's behaviour")
    waker = Waker()
    assert not waker.listen(here.db_path, here.root, NODE)
    assert waker.idle_poll == 1.0
    wake_node(here, NODE)  # no node dir, no server: nothing raises
