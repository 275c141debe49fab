"""A node whose supervisor was lost before it opened a run: ``resume`` heals it (it lands
``exited``: there is no run to park) and the refusal says how to start it again."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fractal.domain.states import Move, Status
from fractal.lifecycle.context import Refused, open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.steering.resume import not_paused, resume
from fractal.lifecycle.trees import init_tree
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from tests.helpers import make_repo


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


def _dead_process() -> tuple[int, float]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    created = psutil.Process(proc.pid).create_time()
    proc.wait(timeout=30)
    return proc.pid, created


def test_a_node_lost_before_its_run_is_healed_and_the_refusal_says_start_continue(
        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    init_node(open_context(repo), "n", {"max_cost": 1.0})
    ledger = Ledger(repo / ".fractal" / "main" / "fractal.db")
    assert ledger.move("main.n", Move.START, supervisor=_dead_process()).ok  # then lost
    with pytest.raises(Refused, match=re.escape(
            "`fractal node start main.n --continue` starts a new run")):
        resume(open_context(repo), "n")
    row = ledger.node("main.n")
    assert row is not None and row.status is Status.EXITED  # healed: no run to park


@pytest.mark.parametrize(("status", "hint"), [
    (Status.EXITED, "`fractal node start main.n --continue` starts a new run"),
    (Status.COMPLETED, "`fractal node start main.n --continue` starts a new run"),
    (Status.STOPPED, "`fractal node start main.n --continue` starts a new run"),
    (Status.KILLED, "`fractal node start main.n --continue` starts a new run"),
    (Status.IDLE, "`fractal node start main.n` starts it"),
    (Status.ACTIVE, None),
])
def test_not_paused_says_what_to_do(status: Status, hint: str | None) -> None:
    why = not_paused("main.n", status)
    assert why.startswith(f"node main.n is {status}; resume needs a paused node")
    if hint is None:
        assert why == f"node main.n is {status}; resume needs a paused node"
    else:
        assert why.endswith(hint)
