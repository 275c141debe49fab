"""The dashboard served to a browser (``fractal open --web``) with one headless chromium
attached, on the 50-node, 100,000-step ledger of ``bench.bigdb``.

Measured: the time from the page's load to the tree on it (the terminal's text read in
the page, as ``tests/browser.py`` reads it); then, over a window in which a radio
message lands every second (the dashboard rebuilding and redrawing its radio pane each
time) and a window with nothing written, the memory (peak proportional set size) and the CPU share
of the server (aiohttp and textual-serve), of the served dashboard (the ``fractal open``
process with the web driver) and of chromium with all its processes. CPU from
``/proc`` by psutil, in 10 ms ticks.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bench import bigdb
from bench.report import Row, section
from bench.sandbox import BenchError, Sandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests/
from tests.browser import Browser, chromium, wait_for_text

REFRESHING_S, IDLE_S = 30.0, 20.0
SIZE = (1280, 800)


def _message(box: Sandbox, serial: int) -> None:
    """A radio message from the first node: a line the dashboard's radio pane shows."""
    node = bigdb.node_names()[0]
    con = sqlite3.connect(box.db, timeout=30.0)
    try:
        con.execute("INSERT INTO messages (message_uuid, node, channel, sender, priority, "
                    "subject, data, created_at) VALUES (?, ?, 'outbox', ?, 5, ?, '', ?)",
                    (f"web-{os.getpid()}-{serial}", node, node, f"web note {serial}",
                     bigdb._ts(10_000_000 + serial)))
        con.commit()
    finally:
        con.close()


class Group:
    """Processes measured together: a root and, at each look, its descendants."""

    def __init__(self, root: psutil.Process, descendants: bool) -> None:
        self.root, self.descendants = root, descendants
        self.peak_rss = 0

    def members(self) -> list[psutil.Process]:
        try:
            kids = self.root.children(recursive=True) if self.descendants else []
        except psutil.Error:
            kids = []
        return [self.root, *kids]

    def cpu(self) -> float:
        """CPU seconds (user and system) of the members alive now."""
        total = 0.0
        for proc in self.members():
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def look(self) -> None:
        """Add up the members' proportional set size (PSS: a page shared by N processes
        counts 1/N in each, so chromium's shared libraries are not counted once per
        process; RSS where PSS cannot be read) and keep the peak."""
        total = 0
        for proc in self.members():
            try:
                total += getattr(proc.memory_full_info(), "pss", 0) or proc.memory_info().rss
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, total)


def _window(groups: dict[str, Group], seconds: float, write: Callable[[int], None] | None
            ) -> tuple[dict[str, float], int]:
    """CPU share (percent of one core) of each group over ``seconds``, and how many
    writes were made: memory looked at about every second, ``write(serial)`` called as
    often when given."""
    before = {name: g.cpu() for name, g in groups.items()}
    started = time.monotonic()
    serial = 0
    while time.monotonic() - started < seconds:
        if write is not None:
            serial += 1
            write(serial)
        for group in groups.values():
            group.look()
        time.sleep(1.0)
    took = time.monotonic() - started
    return {name: 100.0 * (g.cpu() - before[name]) / took for name, g in groups.items()}, serial


def run(box: Sandbox, log: Callable[[str], None]) -> tuple[list[Row], list[str]]:
    """The part's rows and footer. Raises BenchError when chromium cannot be had or the
    page never shows the tree."""
    executable, why = chromium()
    if executable is None:
        raise BenchError(f"the web part needs chromium: {why}")
    counts = bigdb.seed(box)
    log(f"web: seeded {counts['nodes']} nodes, {counts['steps']:,} steps; serving")
    server = subprocess.Popen([sys.executable, "-m", "fractal", "open", "--web", "--port", "0"],
                              cwd=box.repo, env=box.env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    browser: Browser | None = None
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise BenchError(f"fractal open --web printed {url!r}")
        browser = Browser(executable, box.base / "chromium")
        browser.size(*SIZE)
        opened = time.monotonic()
        browser.open(url)
        first = bigdb.node_names()[0].rsplit(".", 1)[1]
        try:
            wait_for_text(browser, first, "radio", timeout=60)
        except AssertionError as exc:
            raise BenchError(f"the page never showed the tree: {exc}") from None
        shown_ms = 1000 * (time.monotonic() - opened)
        served = [p for p in psutil.Process(server.pid).children(recursive=True)
                  if "open" in p.cmdline()]
        if not served:
            raise BenchError("no served dashboard process under the server")
        groups = {"server": Group(psutil.Process(server.pid), False),
                  "dashboard": Group(served[0], False),
                  "chromium": Group(psutil.Process(browser.proc.pid), True)}
        log(f"web: the page showed the tree in {shown_ms:.0f} ms; {REFRESHING_S:.0f} s with "
            f"a radio message a second, then {IDLE_S:.0f} s idle")
        busy, written = _window(groups, REFRESHING_S, lambda n: _message(box, n))
        wait_for_text(browser, f"web note {written}", timeout=30)
        idle, _ = _window(groups, IDLE_S, None)
    finally:
        if browser is not None:
            browser.close()
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    mib = 1024 * 1024
    rows = [section(f"fractal open --web, one headless chromium attached: {counts['nodes']} "
                    f"nodes, {counts['steps']:,} steps, a {SIZE[0]}x{SIZE[1]} page"),
            Row("page load -> the tree on the page (a new fractal open starts)", [shown_ms])]
    labels = {"server": "server (aiohttp, textual-serve)",
              "dashboard": "served dashboard (fractal open, web driver)",
              "chromium": "chromium, all its processes"}
    for name, label in labels.items():
        rows.append(Row(f"{label}: peak PSS", [groups[name].peak_rss / mib], unit="MiB",
                        peak=True, count=int(REFRESHING_S + IDLE_S)))
        rows.append(Row(f"{label}: CPU, a message a second", [], note=f"{busy[name]:.1f} %",
                        count=written))
        rows.append(Row(f"{label}: CPU, idle", [], note=f"{idle[name]:.1f} %"))
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    foot = [f"web: CPU as a share of one core over {REFRESHING_S:.0f} s (refreshing) and "
            f"{IDLE_S:.0f} s (idle); memory peaks sampled once a second; load average at "
            f"the end {load}"]
    return rows, foot
