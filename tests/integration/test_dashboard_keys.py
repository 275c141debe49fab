"""The dashboard's merge and send keys, and a tree destroyed under it, driven by Textual's
Pilot against a real tree (real git, real SQLite, the real verbs); effects are read back
from the rows and the branches."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fractal.store.engine import close_engines
from fractal.tree import Tree
from fractal.tui.app import Dashboard
from tests.helpers import SCALE, copy_of_tree, git, make_repo
from tests.trees import run_cli

SIZE = (150, 45)


def _fractal(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``fractal ARGS`` as a real process in ``repo`` (forked by ``tests/cliserver.py``)."""
    return run_cli(list(args), repo, check=False, timeout=60)


def _build(repo: Path) -> None:
    make_repo(repo)
    for args in (["init"], ["node", "init", "feat"]):
        done = _fractal(repo, *args)
        assert done.returncode == 0, done.stderr
    worktree = repo / ".worktrees" / "main.feat"
    (worktree / "feature.txt").write_text("the feature\n")
    git(worktree, "add", "feature.txt")
    git(worktree, "commit", "-q", "-m", "feature")


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """``main`` with ``main.feat`` one commit ahead (``feature.txt``), made by the CLI once
    per test process and copied for each test."""
    yield copy_of_tree(tmp_path / "repo", "dashboard-keys-feat", _build)
    close_engines()


def _rows(repo: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as conn:
        return list(conn.execute(sql))


async def _until(pilot: Any, predicate: Callable[[], object], timeout: float = 60,
                 message: str = "") -> None:
    pause: Callable[[float], Awaitable[None]] = pilot.pause
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout * SCALE
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out: {message}")
        await pause(0.05)


def _dialog(app: Dashboard) -> str:
    if app.screen is app.screen_stack[0]:
        return ""
    return " ".join(str(s.render()) for s in app.screen.query("Static"))


def _app(repo: Path, *, live: bool = False) -> Dashboard:
    app = Dashboard(Tree(repo=repo, root="main"), live=live)
    app.selected = "main.feat"
    return app


def test_the_merge_key_shows_the_diffstat_and_merges_on_yes(repo: Path) -> None:
    async def scenario() -> None:
        app = _app(repo)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            await pilot.press("m")
            await _until(pilot, lambda: "1 file changed" in _dialog(app),
                         message="the confirmation with the diffstat")
            await pilot.press("n")  # declined: nothing merged
            await _until(pilot, lambda: not _dialog(app), message="dialog closed")
            assert _rows(repo, "SELECT status FROM merges") == []
            await pilot.press("m")
            await _until(pilot, lambda: "merge main.feat" in _dialog(app), message="asked")
            await pilot.press("y")
            await _until(pilot, lambda: _rows(repo, "SELECT status FROM merges")
                         == [("merged",)], message="the merges row")
            await _until(pilot, lambda: any("merged main.feat into main" in o
                                            for o in app.outcomes), message="the notice")

    asyncio.run(scenario())
    shown = subprocess.run(["git", "show", "main:feature.txt"], cwd=repo, check=True,
                           capture_output=True, text=True)
    assert shown.stdout == "the feature\n"


def test_the_send_key_posts_to_the_node_inbox(repo: Path) -> None:
    async def scenario() -> None:
        app = _app(repo)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            await pilot.press("n")
            await _until(pilot, lambda: "message to main.feat" in _dialog(app),
                         message="the prompt")
            await pilot.press("escape")  # cancelled: nothing sent
            await _until(pilot, lambda: not _dialog(app), message="prompt closed")
            await pilot.press("n")
            await _until(pilot, lambda: "message to main.feat" in _dialog(app),
                         message="the prompt again")
            await pilot.press(*"rebase on main", "enter")
            await _until(pilot, lambda: _rows(repo, "SELECT 1 FROM messages WHERE "
                                              "channel = 'inbox'"), message="the message")

    asyncio.run(scenario())
    assert _rows(repo, "SELECT node, channel, sender, subject, data FROM messages WHERE "
                 "channel = 'inbox'") == [("main.feat", "inbox", "main", "rebase on main",
                                           "rebase on main")]


def test_a_tree_destroyed_under_the_dashboard_is_shown_gone_never_recreated(
        repo: Path) -> None:
    data_dir = repo / ".fractal" / "main"

    async def scenario() -> None:
        app = _app(repo, live=True)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None and app.snapshot.nodes,
                         message="first paint")
            close_engines()
            done = _fractal(repo, "destroy", "-f")
            assert done.returncode == 0, done.stderr
            await _until(pilot, lambda: app.snapshot is not None and app.snapshot.gone,
                         message="shown gone")
            assert "gone" in str(app.query_one("#inbox").render())
            await pilot.press("p")  # a key on a gone tree is refused, writes nothing
            await pilot.pause(2.5)  # two more polls: still nothing recreated
            assert not data_dir.exists()

    asyncio.run(scenario())
    assert not data_dir.exists()


def test_the_confirmation_takes_enter_as_yes_and_escape_as_no() -> None:
    from textual.app import App

    from fractal.tui.screens import ConfirmScreen

    answers: list[bool | None] = []

    class Host(App[None]):
        def ask(self) -> None:
            self.push_screen(ConfirmScreen("approve main.feat?"), answers.append)

    async def scenario() -> None:
        app = Host()
        async with app.run_test(size=SIZE) as pilot:
            for key in ("enter", "escape", "y", "n"):
                app.ask()
                await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen),
                             message="the box")
                await pilot.press(key)
                await _until(pilot, lambda: not isinstance(app.screen, ConfirmScreen),
                             message=f"closed by {key}")

    asyncio.run(scenario())
    assert answers == [True, False, True, False]


def test_a_write_reaches_the_screen_by_the_watchdog_wake_not_the_poll(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fractal.tui.app as dashboard

    monkeypatch.setattr(dashboard, "REFRESH_S", 3600.0)  # no poll within the test

    async def scenario() -> None:
        app = _app(repo, live=True)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            assert app.db_watch._observer is not None  # watchdog runs here
            with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as conn:
                conn.execute("INSERT INTO messages (message_uuid, node, channel, sender, "
                             "priority, subject, data, created_at) VALUES ('u-1', "
                             "'main.feat', 'outbox', 'main.feat', 5, 'tests pass', '', "
                             "'2026-01-01T00:00:00.000Z')")
            await _until(pilot, lambda: "tests pass" in str(app.query_one("#feed").render()),
                         timeout=20, message="the radio feed shows the message")

    asyncio.run(scenario())


def test_retired_nodes_hidden_until_toggled_filter_and_search() -> None:
    from dataclasses import replace

    from fractal.tui.screens import PromptScreen
    from tests.integration.test_dashboard_snapshot import (
        FixedBuilder,
        _view,
        fixed_history,
        fixed_snapshot,
    )

    base = fixed_snapshot()
    snap = replace(base, nodes=tuple(sorted(
        (*base.nodes, _view("main.old", "retired", reason="superseded")),
        key=lambda v: v.branch)))
    app = Dashboard(Tree(repo=Path("/nonexistent-fractal-repo"), root="main"),
                    builder=FixedBuilder(snap), history=fixed_history, live=False)

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            assert "main.old" not in app.node_tree.members  # retired: hidden
            await pilot.press("t")
            assert "main.old" in app.node_tree.members
            await pilot.press("t")
            assert "main.old" not in app.node_tree.members
            await pilot.press("x")  # only what waits for a human (the inbox's nodes)
            assert app.node_tree.members == ("main.api.auth", "main.api.db", "main.docs")
            await pilot.press("x")  # only active nodes
            assert app.node_tree.members == ("main.api", "main.api.auth", "main.lexer")
            await pilot.press("x")  # all again
            assert len(app.node_tree.members) == 6
            await pilot.press("slash")
            await _until(pilot, lambda: isinstance(app.screen, PromptScreen),
                         message="the search prompt")
            await pilot.press(*"lexer", "enter")
            await _until(pilot, lambda: app.selected == "main.lexer",
                         message="the cursor on the match")

    asyncio.run(scenario())


def test_the_node_pane_tails_the_selected_node_transcript(repo: Path) -> None:
    log = Tree(repo=repo, root="main").node("main.feat").pane_log
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"line {n}\n" for n in range(1, 41)))

    async def scenario() -> None:
        app = _app(repo)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: "line 40" in str(app.query_one("#tail").render()),
                         message="the transcript's last line")
            shown = str(app.query_one("#tail").render())
            assert "line 27" in shown and "line 26" not in shown  # its last 14 lines

    asyncio.run(scenario())


def test_a_key_verb_runs_with_real_streams_while_textual_captures_them(repo: Path) -> None:
    """A verb that reads ``sys.stdout.encoding``, prints, and hands ``sys.stdout`` to a
    child process works under the running app; what it wrote joins its notification."""
    def verb() -> str:
        encoding = sys.stdout.encoding
        print("from the verb")
        subprocess.run([sys.executable, "-c", "print('from its child')"], stdout=sys.stdout,
                       stderr=sys.stderr, check=True)
        return f"done ({encoding})"

    async def scenario() -> None:
        app = _app(repo)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            captured = sys.stdout
            assert not hasattr(captured, "encoding")  # Textual's capture is in place
            app.run_verb("probe", verb)
            await _until(pilot, lambda: app.outcomes, message="the verb's outcome")
            assert sys.stdout is captured  # put back

        assert app.outcomes == ["probe: done (utf-8); from the verb; from its child"]

    asyncio.run(scenario())


def test_an_unexpected_fault_in_a_key_writes_a_crash_log(repo: Path) -> None:
    logs = repo / ".fractal" / "main" / "logs"

    def verb() -> object:
        raise RuntimeError("the verb broke")

    async def scenario() -> None:
        app = _app(repo)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            app.run_verb("resume", verb)
            await _until(pilot, lambda: app.outcomes, message="the verb's outcome")
            assert app.is_running  # the dashboard survives its verb's fault
        outcome, = app.outcomes
        assert outcome.startswith("resume: Internal error (RuntimeError: the verb broke); "
                                  "the traceback is in ")
        saved, = logs.glob("crash-*.log")
        assert str(saved) in outcome
        body = saved.read_text()
        assert "RuntimeError: the verb broke" in body and "Traceback" in body

    asyncio.run(scenario())


def test_a_refusal_in_a_key_writes_no_crash_log(repo: Path) -> None:
    from fractal.errors import FractalError

    def verb() -> object:
        raise FractalError("main.feat is not paused; nothing to resume")

    async def scenario() -> None:
        app = _app(repo)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            app.run_verb("resume", verb)
            await _until(pilot, lambda: app.outcomes, message="the verb's outcome")
        assert app.outcomes == ["resume: main.feat is not paused; nothing to resume"]

    asyncio.run(scenario())
    assert not list((repo / ".fractal" / "main" / "logs").glob("crash-*.log"))


def test_the_cursor_follows_its_branch_when_nodes_appear_above_it(repo: Path) -> None:
    """Nodes inserted above the selection between two reads: the highlight, the node pane
    and the keys all stay on the branch the operator chose, not on its old row."""
    from textual.widgets import Tree as TreeWidget

    def init(name: str) -> None:
        parent, _, leaf = name.rpartition(".")
        done = _fractal(repo, "node", "init", leaf,
                        *(("--parent", f"main.{parent}") if parent else ()))
        assert done.returncode == 0, done.stderr

    for name in ("lead", "lead.add", "lead.fix"):
        init(name)

    async def scenario() -> None:
        app = Dashboard(Tree(repo=repo, root="main"), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: "main.lead.fix" in app.node_tree.members, message="painted")
            widget = app.query_one("#tree", TreeWidget)
            for _ in range(2):  # (opened on main.feat) -> main.lead -> main.lead.add
                await pilot.press("down")
            await _until(pilot, lambda: app.selected == "main.lead.add", message="selected")
            for name in ("items", "items.w1", "items.w2", "items.w3", "items.w4"):
                init(name)  # all sort above main.lead
            app.refresh_snapshot()
            await _until(pilot, lambda: "main.items.w4" in app.node_tree.members, message="rebuilt")
            await pilot.pause(0.3)  # every highlight message the rebuild posted is handled
            cursor = widget.cursor_node
            assert cursor is not None and cursor.data == "main.lead.add"
            assert app.selected == "main.lead.add"
            await _until(pilot, lambda: app.shown is not None
                         and app.shown.branch == "main.lead.add", message="the node pane")
            assert "main.lead.add" in str(app.query_one("#card").render())
            await pilot.press("n")
            await _until(pilot, lambda: "message to main.lead.add" in _dialog(app),
                         message="the prompt names the highlighted node")
            await pilot.press(*"hello", "enter")
            await _until(pilot, lambda: _rows(repo, "SELECT 1 FROM messages WHERE "
                                              "channel = 'inbox'"), message="the message")

    asyncio.run(scenario())
    assert _rows(repo, "SELECT node FROM messages WHERE channel = 'inbox'") == \
        [("main.lead.add",)]


class _PaneRecorder:
    """The o key's tmux seam, recorded: ``inside`` says whether a tmux client shows this
    dashboard (so switching succeeds)."""

    def __init__(self, inside: bool) -> None:
        self.inside = inside
        self.calls: list[str] = []

    def switch(self, tree: Tree, branch: str) -> bool:
        self.calls.append(f"switch {branch}")
        return self.inside

    def attach(self, tree: Tree, branch: str) -> int:
        self.calls.append(f"attach {branch}")
        return 0


class _SuspendingDashboard(Dashboard):
    """A dashboard whose terminal can be handed over (Pilot's headless one cannot)."""

    calls: list[str]

    @contextlib.contextmanager
    def suspend(self) -> Iterator[None]:
        self.calls.append("suspend")
        yield
        self.calls.append("back")


@pytest.mark.parametrize(("inside", "calls"), [
    (True, ["switch main.feat"]),  # inside tmux: the client switches, the app stays
    (False, ["switch main.feat", "suspend", "attach main.feat", "back"]),
])
def test_the_open_key_switches_inside_tmux_else_suspends_and_attaches(
        repo: Path, inside: bool, calls: list[str]) -> None:
    panes = _PaneRecorder(inside)

    async def scenario() -> None:
        app = _SuspendingDashboard(Tree(repo=repo, root="main"), live=False)
        app.selected, app.calls, app.panes = "main.feat", panes.calls, (panes.switch,
                                                                         panes.attach)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            await pilot.press("o")
            await _until(pilot, lambda: panes.calls, message="the key acted")
            await pilot.pause(0.2)
        assert app.outcomes == []

    asyncio.run(scenario())
    assert panes.calls == calls


def test_the_open_key_refuses_a_node_without_a_pane_and_a_terminal_it_cannot_hand_over(
        repo: Path) -> None:
    panes = _PaneRecorder(inside=False)

    async def scenario() -> None:
        app = _app(repo)  # the real tmux seam: main.feat is idle, it has no pane
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            await pilot.press("o")
            await _until(pilot, lambda: app.outcomes, message="the refusal")
            assert app.outcomes[0].startswith("open: node main.feat is idle; only an active "
                                              "node has a pane")
            app.panes = (panes.switch, panes.attach)  # outside tmux, headless: no hand-over
            await pilot.press("o")
            await _until(pilot, lambda: len(app.outcomes) == 2, message="the second refusal")
            assert app.outcomes[1] == ("open: this terminal cannot be handed to tmux; run "
                                       "`fractal node attach main.feat` in another one")
            assert app.is_running

            def broken(tree: Tree, branch: str) -> bool:
                raise RuntimeError("tmux went away")

            app.panes = (broken, panes.attach)  # an unexpected fault: a crash log
            await pilot.press("o")
            await _until(pilot, lambda: len(app.outcomes) == 3, message="the fault")
            assert app.outcomes[2].startswith("open: Internal error (RuntimeError: tmux "
                                              "went away); the traceback is in ")
            assert app.is_running

    asyncio.run(scenario())
    assert panes.calls == ["switch main.feat"]  # never attached without the terminal
    saved, = (repo / ".fractal" / "main" / "logs").glob("crash-*.log")
    assert "RuntimeError: tmux went away" in saved.read_text()


class _FaultyDashboard(Dashboard):
    """A dashboard whose redraw and prompt fail while ``broken`` is set: the faults an
    unexpected exception in the ``x``, ``t`` and ``/`` keys would meet."""

    broken = False

    def apply(self, snap: Any) -> None:
        if self.broken:
            raise RuntimeError("the redraw broke")
        super().apply(snap)

    def push_screen(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise RuntimeError("the prompt broke")
        return super().push_screen(*args, **kwargs)


def test_a_fault_in_the_filter_retired_and_search_keys_leaves_the_dashboard_running(
        repo: Path) -> None:
    async def scenario() -> None:
        app = _FaultyDashboard(Tree(repo=repo, root="main"), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await _until(pilot, lambda: app.snapshot is not None, message="first paint")
            app.broken = True
            for key in ("x", "t", "slash"):
                before = len(app.outcomes)
                await pilot.press(key)
                await _until(pilot, lambda: len(app.outcomes) > before,  # noqa: B023
                             message=f"the {key} key's fault")
                assert app.is_running
            app.broken = False
            await pilot.press("t")  # the dashboard still answers
            assert app.is_running and app.show_retired is False
        assert [o.split(" (")[0] for o in app.outcomes] == [
            "filter: Internal error", "retired: Internal error", "search: Internal error"]
        assert "RuntimeError: the prompt broke" in app.outcomes[2]

        for outcome, error in zip(app.outcomes, ("redraw", "redraw", "prompt"), strict=True):
            saved = Path(outcome.split("the traceback is in ")[1].split(" (a fractal bug")[0])
            assert f"RuntimeError: the {error} broke" in saved.read_text()

    asyncio.run(scenario())
