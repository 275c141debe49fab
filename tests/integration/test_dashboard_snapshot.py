"""The dashboard's main screen for a fixed tree, compared with a stored SVG
(pytest-textual-snapshot; ``--snapshot-update`` rewrites it after a deliberate change).

Deterministic: the snapshot, the history and the clock are fixed values; nothing is read
from a database or the wall clock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fractal.domain.attention import Gate, NodeFacts, classify
from fractal.domain.dashview import Live, gauge
from fractal.lifecycle.inbox import Entry
from fractal.store.dashboard import CheckPoint, History
from fractal.store.rows import IterationRow, RunRow, StepRow
from fractal.tree import Tree
from fractal.tui.app import Dashboard
from fractal.tui.snapshot import FeedLine, NodeView, Snapshot

NOW = 1_767_225_600.0 + 3600  # 2026-01-01T01:00:00Z
T0 = "2026-01-01T00:40:00.000Z"


IDLE = Live()


def _view(branch: str, status: str, live: Live = IDLE, **extra: Any) -> NodeView:
    spent, cap = extra.pop("spent", None), extra.pop("cap", None)
    return NodeView(branch=branch, status=status, title=extra.pop("title", ""), live=live,
                    reason=extra.pop("reason", ""), spent=spent, cap=cap,
                    gauge=gauge(spent, cap, None), stalled=extra.pop("stalled", False),
                    **extra)


def fixed_snapshot() -> Snapshot:
    nodes = (
        _view("main.api", "active", Live(3, 2, 10, 3, 5, "EXECUTE", NOW - 252), spent=1.2,
              cap=5.0, title="REST endpoints", agent="claude", model="opus",
              session="s-123", config=(("max_cost", "5.0"), ("step_timeout", '"10m"'))),
        _view("main.api.auth", "active", Live(1, 1, 3, 2, 3, "REVIEW", NOW - 60, gate=True),
              spent=0.95, cap=1.0),
        _view("main.api.db", "exited", reason="subtree cost budget reached (spent $2.0100 "
              ">= $2.00 max)", spent=2.01, cap=2.0),
        _view("main.docs", "paused", Live(2)),
        _view("main.lexer", "active", Live(4, 1, None, 1, 2, "PLAN", NOW - 900), stalled=True),
        _view("main.parser", "completed", reason="Reached max iterations (4)"),
    )
    facts = [NodeFacts("main.api.auth", "active", run_id=1,
                       gates=(Gate(17, "REVIEW", NOW - 60, "3 files changed, 40 insertions(+)"),)),
             NodeFacts("main.api.db", "exited", run_id=2, run_status="exited", run_exit=0,
                       run_reason="subtree cost budget reached (spent $2.0100 >= $2.00 max)",
                       run_ended=NOW - 600, run_spent=2.01, run_cap=2.0),
             NodeFacts("main.docs", "paused", run_id=2, paused_since=NOW - 300,
                       pause_reason="paused by operator: lunch")]
    inbox = tuple(Entry(i, a) for i, a in classify(facts, NOW))
    feed = (FeedLine("2026-01-01T00:50:00.000Z", "main.api.db", "outbox",
                     "run exited: subtree cost budget reached"),)
    return Snapshot("main", NOW, nodes, inbox, feed)


class FixedBuilder:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def build(self, *, force: bool = False, now: float | None = None) -> Snapshot:
        return self.snap


def fixed_history(branch: str) -> History:
    run = RunRow(3, branch, None, "claude", 5.0, "active", None, "", T0, None)
    it = IterationRow(9, branch, 3, 2, "claude", "opus", "s-123", "active", None, "",
                      "2026-01-01T00:50:00.000Z", None)

    def step(sid: int, n: int, name: str, status: str, cost: float | None, end: str | None,
             meta: str = "") -> StepRow:
        return StepRow(sid, branch, 9, 3, n, name, "claude", "opus", "s-123", status, 0, cost,
                       None, None, None, meta, "2026-01-01T00:50:00.000Z", end, None, None,
                       None)

    steps = [step(30, 1, "PLAN", "completed", 0.12, "2026-01-01T00:52:00.000Z"),
             step(31, 2, "TEST", "failed", 0.05, "2026-01-01T00:53:00.000Z",
                  "agent error (exit 2)"),
             step(32, 3, "EXECUTE", "active", None, None)]
    checks = [CheckPoint("x", 1, 5), CheckPoint("y", 1, 3), CheckPoint("z", 0, 0)]
    return History([run], {3: [it]}, {9: steps}, checks)


def fixed_app() -> Dashboard:
    app = Dashboard(Tree(repo=Path("/nonexistent-fractal-repo"), root="main"),
                    builder=FixedBuilder(fixed_snapshot()), history=fixed_history,
                    clock=lambda: NOW, live=False)
    app.selected = "main.api"
    return app


def test_main_screen(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), terminal_size=(150, 42))


def _columns(app: Dashboard) -> str:
    """``one``: the node pane under the tree pane, as wide as the screen; ``two``: side by
    side (what a person sees of the layout, read off the panes' regions)."""
    tree, node = app.query_one("#left").region, app.query_one("#node").region
    if node.y >= tree.bottom and node.width == app.size.width:
        return "one"
    assert node.x >= tree.right and node.y == tree.y, (tree, node)
    return "two"


@pytest.mark.parametrize(("width", "columns"), [(150, "two"), (100, "two"), (99, "one"),
                                                 (44, "one")])
def test_a_narrow_window_stacks_the_node_pane_under_the_tree(width: int,
                                                             columns: str) -> None:
    async def scenario() -> None:
        app = fixed_app()
        async with app.run_test(size=(150, 42)) as pilot:
            await pilot.resize_terminal(width, 46)
            await pilot.pause()
            assert _columns(app) == columns
            assert "main.api" in str(app.query_one("#card").render())
            await pilot.resize_terminal(150, 42)  # and back, as a window is widened
            await pilot.pause()
            assert _columns(app) == "two"

    asyncio.run(scenario())
