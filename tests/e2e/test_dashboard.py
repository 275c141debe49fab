"""``fractal open`` driven by Textual's Pilot against a real tree: a real database and
real supervisors running the stub agent. Each key's effect is read back from the rows."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.css.query import NoMatches

from fractal import tmux
from fractal.tree import Tree as FractalTree
from fractal.tui.app import Dashboard
from tests.e2e.conftest import Tree
from tests.helpers import SCALE, wait_until

pytestmark = pytest.mark.e2e

SIZE = (150, 45)


async def _until(pilot: Any, predicate: Callable[[], object], timeout: float = 60,
                 message: str = "") -> None:
    """Let the app run (``pilot.pause``) until ``predicate()`` is truthy. A widget the
    predicate looks for that is not mounted yet (a screen just pushed) counts as false."""
    pause: Callable[[float], Awaitable[None]] = pilot.pause
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout * SCALE
    while not _holds(predicate):
        if loop.time() > deadline:
            raise AssertionError(f"timed out: {message}")
        await pause(0.1)


def _holds(predicate: Callable[[], object]) -> bool:
    try:
        return bool(predicate())
    except NoMatches:
        return False


async def _select(pilot: Any, app: Dashboard, branch: str) -> None:
    """Move the cursor with the arrow keys, towards ``branch`` (a press past either end of
    the tree moves nothing and costs Pilot's idle wait, up to 2 s on a loaded machine)."""
    press: Callable[..., Awaitable[None]] = pilot.press
    for _ in range(24):
        if app.selected == branch:
            return
        lines = list(app.node_tree.members)
        here = lines.index(app.selected) if app.selected in lines else -1
        await press("down" if branch in lines and lines.index(branch) > here else "up")
    raise AssertionError(f"could not select {branch}; at {app.selected}")


def _app(tree: Tree) -> Dashboard:
    return Dashboard(FractalTree(repo=tree.repo, root="main"))


def _label(app: Dashboard, branch: str) -> str:
    return app.node_tree.label_of(branch)


def test_navigation_and_the_pause_resume_kill_keys(tree: Tree, tmp_path: Path) -> None:
    go = tmp_path / "go"
    tree.node("busy", {"01-A.md": f"[stub:hang-unless={go}]"}, "--no-sync")
    tree.node("calm", {"01-A.md": "x"})
    tree.cli("node", "start", "busy")

    async def scenario() -> None:
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: "step 1/1 A" in _label(app, "main.busy"),
                         message="busy's live detail")
            assert "idle" not in _label(app, "main.busy")
            await _select(pilot, app, "main.calm")
            await _select(pilot, app, "main.busy")
            await pilot.press("p")
            await _until(pilot, lambda: tree.status("busy") == "paused", message="paused")
            (run_id,), = tree.sql("SELECT MAX(run_id) FROM runs WHERE node = 'main.busy'")
            await _until(pilot, lambda: "parked" in _label(app, "main.busy"),
                         message="the tree shows it parked")
            (session, socket), = tree.sql("SELECT tmux_session, tmux_socket FROM nodes "
                                          "WHERE node = 'main.busy'")
            await _until(pilot, lambda: tmux.probe(str(session), Path(str(socket)))
                         is tmux.Liveness.GONE, message="the parked pane ended")
            await pilot.press("r")  # a real supervisor is hosted again, from the app
            try:
                await _until(pilot, lambda: tree.status("busy") == "active", message="resumed")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; {app.outcomes}") \
                    from None
            await _until(pilot, lambda: any(o.startswith("resume:") for o in app.outcomes),
                         message="the resume notification")
            assert [o for o in app.outcomes if o.startswith("resume:")] == \
                [f"resume: resumed main.busy (run {run_id})"]
            await _until(pilot, lambda: tree.sql(
                "SELECT 1 FROM steps WHERE node = 'main.busy' AND run_id = ? AND "
                "ended_at IS NULL", run_id), message="the resumed run's step runs")
            assert tree.sql("SELECT COUNT(*) FROM events WHERE node = 'main.busy' AND "
                            "event = 'resume' AND status = 'failed'") == [(0,)]
            assert not list((tree.repo / ".fractal" / "main" / "logs").glob("crash-*"))
            await pilot.press("k")
            await pilot.press("n")  # declined: nothing happens
            await pilot.pause(0.5)
            assert tree.status("busy") == "active"
            await pilot.press("k")
            await pilot.press("y")
            await _until(pilot, lambda: tree.status("busy") == "killed", message="killed")
            await _until(pilot, lambda: "killed" in str(app.query_one("#card").render()),
                         message="the card shows killed")

    asyncio.run(scenario())


def test_the_approve_key_shows_the_diffstat_then_releases_the_gate(tree: Tree) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("gated", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "gated")
    # Poll the row, not the CLI: a CLI process per poll starves the booting supervisor.
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE node = 'main.gated' AND "
                                "approved = '' AND ended_at IS NULL AND "
                                "metadata = 'awaiting approval'"), timeout=30,
               message="gate pending")
    assert json.loads(tree.cli("node", "pending", "--json").stdout)  # the CLI agrees

    async def scenario() -> None:
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: "awaiting approval" in _label(app, "main.gated"),
                         message="the gate shown")
            assert "gate" in str(app.query_one("#inbox").render())
            await _select(pilot, app, "main.gated")
            await pilot.press("a")
            await _until(pilot, lambda: "change" in str(
                app.screen.query_one("#dialog").query("Static").first().render())
                if app.screen is not app.screen_stack[0] else False,
                message="the confirmation with the diffstat")
            await pilot.press("y")
            await _until(pilot, lambda: tree.status("gated") == "completed",
                         message="approved and completed")
            (step_id,), = tree.sql("SELECT step_id FROM steps WHERE node = 'main.gated' "
                                   "AND step_name = 'A'")
            assert f"approve: approved main.gated step {step_id} (A)" in app.outcomes

    asyncio.run(scenario())


def test_a_node_whose_supervisor_died_is_shown_gone_and_never_written(tree: Tree) -> None:
    tree.node("doomed", {"01-A.md": "[stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "doomed")
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE node = 'main.doomed'"),
               timeout=30, message="the step runs")
    (pid, session, socket), = tree.sql("SELECT supervisor_pid, tmux_session, tmux_socket "
                                       "FROM nodes WHERE node = 'main.doomed'")
    os.kill(int(str(pid)), signal.SIGKILL)  # no chance to close its rows
    import subprocess

    subprocess.run(["tmux", "-S", str(socket), "kill-session", "-t", f"={session}"],
                   check=False, capture_output=True)

    async def scenario() -> None:
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: "supervisor gone" in _label(app, "main.doomed"),
                         message="shown gone")
            await pilot.pause(1.5)
            assert tree.status("doomed") == "active"  # the dashboard wrote nothing
            tree.cli("node", "status", "doomed")  # any read heals it
            # the heal parks the run (interrupted: supervisor lost), resumable
            try:
                await _until(pilot, lambda: "‖ doomed" in _label(app, "main.doomed")
                             and "gone" not in _label(app, "main.doomed"),
                             message="the healed status shown")
            except AssertionError as exc:
                snap = app.snapshot
                raise AssertionError(f"{exc}: {_label(app, 'main.doomed')!r} "
                                     f"{tree.sql('SELECT status FROM nodes')} "
                                     f"{snap.node('main.doomed') if snap else None}") from None

    asyncio.run(scenario())


@pytest.mark.parametrize(("key", "after", "status", "ran"), [
    ("s", "stop", "stopped", ["A"]),  # after the current step: B never starts
    ("f", "finish", "completed", ["A", "B"]),  # after the current iteration: B runs too
])
def test_the_stop_and_finish_keys_end_the_run_as_the_cli_verbs_do(
        tree: Tree, tmp_path: Path, key: str, after: str, status: str,
        ran: list[str]) -> None:
    go = tmp_path / "go"
    steps = {"01-A.md": f"[stub:hang-unless={go}]", "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("busy", steps, "--no-sync", "--max-iters", "5")
    tree.cli("node", "start", "busy")

    async def scenario() -> None:
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: "step 1/2 A" in _label(app, "main.busy"),
                         message="busy's step A runs")
            await _select(pilot, app, "main.busy")
            await pilot.press(key)
            await pilot.press("n")  # declined: no signal
            await pilot.pause(0.5)
            assert tree.sql("SELECT 1 FROM signals WHERE node = 'main.busy'") == []
            await pilot.press(key)
            await pilot.press("y")
            await _until(pilot, lambda: tree.sql(
                "SELECT signal FROM signals WHERE node = 'main.busy'"),
                message=f"the {after} signal")
            assert tree.sql("SELECT signal FROM signals WHERE node = 'main.busy'") == [(after,)]
            await _until(pilot, lambda: any(o.startswith(f"{after}:") for o in app.outcomes),
                         message="the notification")
            assert not any("Internal error" in o or "skipped" in o for o in app.outcomes)
            go.touch()  # step A ends
            await _until(pilot, lambda: tree.status("busy") == status,
                         message=f"the run ended {status}")

    asyncio.run(scenario())
    steps_run = [str(r[0]) for r in tree.sql(
        "SELECT step_name FROM steps WHERE node = 'main.busy' ORDER BY step_id")]
    assert steps_run == ran
    (reason,), = tree.sql("SELECT metadata FROM runs WHERE node = 'main.busy'")
    assert str(reason).startswith("Stopped" if key == "s" else "Finished")
