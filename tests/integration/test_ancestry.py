"""The acting node follows process ancestry: a real subreaper stands in for a node's
supervisor, a double-forked, ``setsid``'d grandchild stands in for what its agent left
running, and contexts built for that grandchild claim to be someone else."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fractal.domain.signals import Signal
from fractal.lifecycle.context import Context, Posing, open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.steering.signal import send
from fractal.lifecycle.trees import init_tree
from fractal.procs.ancestry import lineage
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import copy_of_tree, make_repo, wait_until

# A subreaper that double-forks a setsid'd grandchild, writes its pid, and waits on stdin.
_SUPERVISOR = r"""
import ctypes, os, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
out = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(out + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(out + ".tmp", out)
        time.sleep(600)
        os._exit(0)
    os._exit(0)
os.wait()
sys.stdin.read()
"""


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo, agent="true")
    top = open_context(repo, {})
    init_node(top, "a", {"max_cost": 10.0})
    init_node(top, "b", {"max_cost": 10.0})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A tree with nodes ``main.a`` and ``main.b``, built once per test process and copied."""
    return copy_of_tree(tmp_path / "repo", "ancestry-a-b", _build)


@pytest.fixture
def escapee(tmp_path: Path) -> Iterator[tuple[psutil.Process, int]]:
    """(the stand-in supervisor, the pid of its double-forked, setsid'd grandchild)."""
    pidfile = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(pidfile)],
                            stdin=subprocess.PIPE)
    try:
        wait_until(pidfile.exists, timeout=30, message="the grandchild started")
        grandchild = int(pidfile.read_text())
        yield psutil.Process(proc.pid), grandchild
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(int(pidfile.read_text())).kill()
        proc.kill()
        proc.wait(timeout=30)


def _node_dir(repo: Path, branch: str) -> Path:
    return repo / ".worktrees" / branch / ".fractal" / branch


def _events(repo: Path, node: str, event: str) -> list[tuple[str, str, str]]:
    with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as db:
        return db.execute("SELECT actor, status, metadata FROM events WHERE node = ? AND "
                          "event = ? ORDER BY event_id", (node, event)).fetchall()


def _under_a(repo: Path, supervisor: psutil.Process) -> None:
    Ledger(repo / ".fractal" / "main" / "fractal.db").set_supervisor(
        "main.a", supervisor.pid, supervisor.create_time())


def test_the_escaped_grandchild_still_descends_from_the_subreaper(
        escapee: tuple[psutil.Process, int]) -> None:
    supervisor, grandchild = escapee
    chain = lineage(grandchild, {supervisor.pid})
    assert chain[0] == (grandchild, None)
    (created,) = [c for pid, c in chain if pid == supervisor.pid]
    assert created == pytest.approx(supervisor.create_time(), abs=0.01)  # psutil's reckoning


def test_under_a_supervisor_the_process_acts_as_its_node(
        repo: Path, escapee: tuple[psutil.Process, int]) -> None:
    supervisor, grandchild = escapee
    _under_a(repo, supervisor)
    own = open_context(repo, {"_NODE": str(_node_dir(repo, "main.a"))}, pid=grandchild)
    assert (own.process_branch, own.acting, own.actor) == ("main.a", "main.a", "main.a")
    in_worktree = open_context(repo / ".worktrees" / "main.a", {}, pid=grandchild)
    assert in_worktree.acting == "main.a"


@pytest.mark.parametrize(("where", "loop"), [
    pytest.param(None, "main.b", id="_NODE-rewritten-to-a-sibling"),
    pytest.param(None, None, id="_NODE-dropped-path-at-the-main-checkout"),
    pytest.param("main.b", None, id="_NODE-dropped-path-at-a-sibling"),
])
def test_a_claim_that_disagrees_is_refused_and_recorded(
        repo: Path, escapee: tuple[psutil.Process, int], where: str | None,
        loop: str | None) -> None:
    supervisor, grandchild = escapee
    _under_a(repo, supervisor)
    cwd = repo if where is None else repo / ".worktrees" / where
    env = {} if loop is None else {"_NODE": str(_node_dir(repo, loop))}
    ctx = open_context(cwd, env, pid=grandchild)
    with pytest.raises(Posing, match=r"runs under main\.a's supervisor") as refused:
        send(ctx, "main.b", Signal.STOP)
    assert refused.value.process == "main.a"
    ((actor, status, metadata),) = _events(repo, "main.b", "stop")
    assert (actor, status) == ("main.a", "failed")
    assert metadata.startswith("refused: this process runs under main.a's supervisor")
    with pytest.raises(Posing):  # a verb on its own node is refused too, recorded on main.a
        _ = open_context(cwd, env, pid=grandchild).acting
    assert [(a, s) for a, s, _m in _events(repo, "main.a", "act")] == [("main.a", "failed")]


def test_a_recycled_supervisor_pid_is_nobody(
        repo: Path, escapee: tuple[psutil.Process, int]) -> None:
    supervisor, grandchild = escapee
    Ledger(repo / ".fractal" / "main" / "fractal.db").set_supervisor(
        "main.a", supervisor.pid, supervisor.create_time() - 5.0)
    ctx = open_context(repo, {}, pid=grandchild)
    assert (ctx.process_branch, ctx.acting) == (None, "main")  # the operator, as before


def test_a_context_for_no_process_reads_only_the_claim(repo: Path) -> None:
    ctx = Context(tree=open_context(repo, {}).tree, cwd=repo, pid=None)
    assert (ctx.process_branch, ctx.acting) == (None, "main")


def test_the_supervisor_process_itself_is_below_no_supervisor(
        repo: Path, escapee: tuple[psutil.Process, int]) -> None:
    supervisor, _grandchild = escapee
    _under_a(repo, supervisor)
    ctx = open_context(repo, {}, pid=supervisor.pid)
    assert (ctx.process_branch, ctx.acting) == (None, "main")


def test_below_another_trees_supervisor_the_process_is_no_one_of_this_tree(
        repo: Path, escapee: tuple[psutil.Process, int]) -> None:
    """A second tree in the repository (rooted at ``dev``): a process below main.a's
    supervisor that places itself in a checkout of ``dev`` (or in a worktree of one of its
    nodes) with ``_NODE`` dropped is refused as posing, not read as dev's operator (it
    retitled dev's nodes, and could retire or delete them)."""
    from fractal.lifecycle.steering.retune import update_node

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("checkout", "-q", "-b", "dev")
    init_tree(repo, agent="true")
    init_node(open_context(repo, {}), "x", {"max_cost": 1.0})
    git("checkout", "-q", "main")
    dev_checkout = repo.parent / "dev-checkout"
    git("worktree", "add", "-q", str(dev_checkout), "dev")
    supervisor, grandchild = escapee
    _under_a(repo, supervisor)
    for cwd in (dev_checkout, repo / ".worktrees" / "dev.x"):
        ctx = open_context(cwd, {}, pid=grandchild)
        assert (ctx.tree.root, ctx.process_branch) == ("dev", "main.a")
        with pytest.raises(Posing, match=r"runs under main\.a's supervisor"):
            update_node(ctx, "dev.x", {"title": "pwn"})
    operator = open_context(dev_checkout, {})  # the operator of dev, below no supervisor
    assert (operator.process_branch, operator.acting) == (None, "dev")
