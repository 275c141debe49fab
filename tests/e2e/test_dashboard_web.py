"""``fractal open --web`` in a real browser: headless chromium over the DevTools
protocol (``tests/browser.py``) against a real tree whose gated node waits for approval.
What the test checks is what a person sees on the page (the terminal's characters), the
key it presses goes through the browser's keyboard, and its effect is read back from the
ledger. One browser per module; its screenshots are written under the test's tmp dir."""

from __future__ import annotations

import array
import fcntl
import json
import os
import socket
import termios
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.browser import Browser, Served, chromium, served, wait_for_text
from tests.e2e.conftest import Tree
from tests.guards import EXEMPT_TREES
from tests.helpers import wait_until

# The first test sets up the module's browser, which on a machine without chromium is an
# apt-get install (minutes): its time wall covers that.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

pytest.importorskip("textual_serve", reason="the web extra (fractal[web]) is not installed")
websocket = pytest.importorskip(
    "websocket", reason="websocket-client (a dev dependency) is not installed")

DESKTOP = (1280, 800)
PHONE = (390, 844)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless chromium for the module (skipped, with the reason, when chromium
    cannot be had)."""
    executable, why = chromium()
    if executable is None:
        pytest.skip(why)
    started = Browser(executable, tmp_path_factory.mktemp("chromium") / "profile")
    EXEMPT_TREES.add(started.proc.pid)  # it and its renderers outlive each test
    try:
        yield started
    finally:
        EXEMPT_TREES.discard(started.proc.pid)
        started.close()


def _redrawn(browser: Browser) -> str | None:
    """The page's text once the dashboard fills a terminal under 100 columns edge to
    edge (its tree pane's border as wide as the terminal, the key bar on the last row),
    else None: the browser refits the terminal first, the app redraws after."""
    columns, _rows = browser.terminal_size()
    lines = browser.screen_text().splitlines()
    if not 0 < columns < 100 or len(lines) < 3:
        return None
    top = next((line for line in lines if "─ tree " in line), "")
    full = len(top.rstrip()) == columns and "quit" in lines[-1]
    return "\n".join(lines) if full else None


def answer_yes(browser: Browser, question: str, tries: int = 3) -> None:
    """Press ``y`` on the confirmation showing ``question`` until it closes. A key that
    arrives in the instant after a dialog pushed from a worker is first painted is not
    taken (seen here, about 0.1 s; a person would press again): at most ``tries``
    presses, each followed by a wait for the dialog to go."""
    for _ in range(tries):
        browser.press("y")
        try:
            wait_until(lambda: question not in browser.screen_text(), timeout=2,
                       message="the confirmation closed")
            return
        except AssertionError:
            continue
    raise AssertionError(f"y did not answer {question!r} in {tries} presses")


def test_the_browser_shows_the_tree_and_its_approve_key_releases_the_gate(
        tree: Tree, browser: Browser, tmp_path: Path) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("gated", steps, "--no-sync", "--max-iters", "1")
    tree.node("docs")
    tree.cli("node", "start", "gated")
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE node = 'main.gated' AND "
                                "approved = '' AND ended_at IS NULL AND "
                                "metadata = 'awaiting approval'"), timeout=30,
               message="gate pending")

    with served(tree.repo, "gated") as web:
        browser.size(*DESKTOP)
        browser.open(web.url)
        screen = wait_for_text(browser, "gated", "docs", "awaiting approval", "inbox")
        assert "main.gated" in screen  # the node pane shows the node given to --web
        columns, _rows = browser.terminal_size()
        assert columns >= 100  # the wide layout: tree and node pane side by side
        browser.screenshot(tmp_path / "dashboard-web-desktop.png")

        browser.press("a")
        question = "approve main.gated: step 1 (A) awaits approval"
        wait_for_text(browser, question, "y/enter yes")  # the confirmation and its diffstat
        answer_yes(browser, question)
        wait_until(lambda: tree.status("gated") == "completed", timeout=60,
                   message="approved from the browser and completed")
        (approved,), = tree.sql("SELECT approved FROM steps WHERE node = 'main.gated' "
                                "AND step_name = 'A'")
        assert approved  # the ledger records the approval the browser's key made
        wait_for_text(browser, "approved main.gated step")  # and the page says so

        browser.size(*PHONE, mobile=True)
        screen = wait_until(lambda: _redrawn(browser), timeout=15,
                            message="the dashboard redrawn at a phone's width")
        lines = screen.splitlines()
        tree_at = next(i for i, line in enumerate(lines) if "─ tree " in line)
        node_at = next(i for i, line in enumerate(lines) if "─ node " in line)
        assert tree_at < node_at  # one column: the tree first, the node pane below it
        assert "gated" in screen and "inbox" in screen
        browser.screenshot(tmp_path / "dashboard-web-phone.png")
    assert "refused" not in web.stderr()


def _dashboards(web: Served) -> list[psutil.Process]:
    """The dashboard processes the server runs now, one per browser (one that has ended,
    a zombie not reaped yet or gone meanwhile, is not running)."""
    running = []
    for p in psutil.Process(web.proc.pid).children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "open" in p.cmdline():
                running.append(p)
        except psutil.NoSuchProcess:  # ZombieProcess too
            continue
    return running


def _pipe_full(pid: int) -> bool:
    """Whether the pipe the dashboard ``pid`` writes its screen to (its stdout) is full,
    within one atomic write (4096 bytes), so its next write blocks: read through its
    /proc entry with FIONREAD, which takes nothing out."""
    fd = os.open(f"/proc/{pid}/fd/1", os.O_RDONLY | os.O_NONBLOCK)
    try:
        held = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, held)
        return held[0] >= fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) - 4096
    finally:
        os.close(fd)


def _connect(web: Served, width: int, height: int, **options: object
             ) -> websocket.WebSocket:
    base = web.base.rstrip("/").removeprefix("http://")
    token = web.url.split("?", 1)[1]
    return websocket.create_connection(
        f"ws://{base}/ws?{token}&width={width}&height={height}", origin=f"http://{base}",
        **options)


def test_a_dashboard_ends_with_its_websocket_however_it_ends(tree: Tree) -> None:
    """Each visit's dashboard process ends when its websocket does: one closed by the
    browser, and one lost in the middle of the server's write (a browser that stopped
    reading, then vanished without a close), which left textual-serve waiting on a
    dashboard blocked on a pipe nobody read."""
    tree.node("docs")
    with served(tree.repo) as web:
        assert _dashboards(web) == []
        polite = _connect(web, 80, 24)
        wait_until(lambda: len(_dashboards(web)) == 1, timeout=30, message="a dashboard")
        polite.settimeout(30)
        polite.recv()  # it draws
        polite.close()
        wait_until(lambda: _dashboards(web) == [], timeout=30,
                   message="the closed websocket's dashboard ended")

        # A tiny receive window it never drains: the server's write to it blocks, the
        # dashboard's repaints (each resize redraws 400x150 cells) pile up in its pipe.
        stalled = _connect(web, 400, 150,
                           sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 2048),))
        (dashboard,) = wait_until(lambda: _dashboards(web), timeout=30,
                                  message="a second dashboard")
        widths = iter(range(100_000))

        def piled_up() -> bool:
            stalled.send(json.dumps(["resize", {"width": 300 + next(widths) % 2 * 100,
                                                "height": 150}]))
            return _pipe_full(dashboard.pid)
        wait_until(piled_up, timeout=60, message="the dashboard blocked on its unread output")
        stalled.sock.shutdown(socket.SHUT_RDWR)  # gone, no close frame
        stalled.sock.close()
        wait_until(lambda: not dashboard.is_running(), timeout=30,
                   message="the lost websocket's dashboard ended")
        assert _dashboards(web) == []
    assert "refused" not in web.stderr()
