"""``fractal node kill`` stops an agent its loop has spawned but not yet recorded: between
the spawn and ``set_step_process`` the step row holds no process group, and the kill
finds the agent by its launch marker instead."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.domain.agent.markers import launch_marker
from fractal.lifecycle.steering.kill import kill
from fractal.procs import processes
from fractal.procs.processes import Launched
from fractal.store.engine import close_engines
from tests.helpers import copy_of_tree
from tests.integration.test_verbs import Small, _activate, _build_small

STUBS = Path(__file__).resolve().parents[1] / "stubs"


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Small]:
    yield Small(copy_of_tree(tmp_path / "repo", "verbs-small", _build_small))
    close_engines()


def test_kill_stops_an_agent_whose_group_is_not_yet_recorded(
        small: Small, spawned: list[Launched]) -> None:
    run = _activate(small, "main.a")
    ledger = small.ledger
    iter_id = ledger.open_iteration("main.a", run, 1, agent="true", model=None)
    step_id = ledger.open_step(node="main.a", run_id=run, iter_id=iter_id, step=1,
                               step_name="A", agent="true", model=None, session=None)
    ctx = small.ctx()
    marker = launch_marker(str(ctx.tree.db_path), step_id)
    agent = processes.spawn_group(["sleep", "300"], cwd=STUBS, env=os.environ,
                                  marker=marker)  # returns once the agent runs, marked
    spawned.append(agent)
    (step,) = ledger.open_steps("main.a")
    assert step.pgid is None  # the loop has not recorded it yet

    results = kill(ctx, "a")

    assert [(r.branch, r.ok) for r in results if r.branch == "main.a"] == [("main.a", True)]
    assert agent.popen.wait(timeout=10) != 0, "the unrecorded agent outlived the kill"
    assert processes.marked_processes(marker) == []
    assert [s.status for s in ledger.steps_of_iteration(iter_id)] == ["killed"]
