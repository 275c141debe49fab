"""The dashboard and the inbox on a ledger of 1,000 nodes and 1,000,000 step rows.

The tree is real (``fractal init`` migrates it); the history goes in with sqlite3 in one
transaction: 100 nodes under the root, 9 under each (1,000), one run of 50 iterations x
20 steps each. 20 nodes are left active (an open run, iteration and step; no supervisor
recorded, so none reads as crashed), 10 of them waiting at an approval gate, and 30 ended
``exited``. Measured in this process against the built tree: the dashboard's first paint
(app start -> first snapshot applied, headless), its refresh (a row written -> snapshot
rebuilt and applied, after the spend backlog of the first paint is summed) and its idle
CPU (five 2 s windows with nothing written); ``fractal inbox --json`` as a subprocess.
The refresh is measured on the live path, as a user sees it: a radio message written by
another connection, the watchdog event, the build thread's read, the apply on the UI loop and the
render of what changed. The earlier measure (build and apply called on the UI loop, then
Pilot's ``pause()``, whose idle detection alone waits 20-40 ms) is reported beside it.
Beside the wall times, the CPU times: on a loaded machine a process waits for a core,
and its CPU time is what it would take on an idle one.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sqlite3
import time
from datetime import UTC, datetime

from bench.report import Row, section
from bench.sandbox import ROOT, BenchError, Sandbox

TOP, KIDS = 100, 9
ITERS, STEPS = 50, 20
ACTIVE, GATED, EXITED = 20, 10, 30
START = 1_767_225_600.0
REFRESHES, INBOX_RUNS = 12, 7
PAINTS = 3  # first paints, each of a new app (the first also reads the cold files)
IDLE_WINDOWS, IDLE_S = 5, 2.0  # idle CPU: 5 windows of 2 s with nothing written


def _ts(seconds: float) -> str:
    moment = datetime.fromtimestamp(START + seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def names() -> list[str]:
    out: list[str] = []
    for top in range(1, TOP + 1):
        out.append(f"{ROOT}.t{top:03d}")
        out += [f"{ROOT}.t{top:03d}.k{kid}" for kid in range(1, KIDS + 1)]
    return out


def seed(box: Sandbox) -> dict[str, int]:
    """Insert the history; return the row counts."""
    con = sqlite3.connect(box.db, timeout=30.0, isolation_level=None)
    counts = {"nodes": 0, "steps": 0}
    clock = 0.0
    step_id = iter_id = 0
    try:
        con.execute("BEGIN IMMEDIATE")
        for run_id, node in enumerate(names(), start=1):
            index = run_id - 1
            live = index < ACTIVE
            status = "active" if live else "exited" if index < ACTIVE + EXITED else "completed"
            con.execute("INSERT INTO nodes (node, parent, title, status, worktree, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (node, node.rsplit(".", 1)[0], f"bench {node}", status,
                         str(box.repo / ".worktrees" / node), _ts(clock)))
            run_start = clock
            iters, steps = [], []
            for number in range(1, ITERS + 1):
                iter_id += 1
                iter_start = clock
                last_iter = live and number == ITERS
                for step in range(1, STEPS + 1):
                    step_id += 1
                    open_step = last_iter and step == STEPS
                    steps.append((step_id, node, iter_id, run_id, step, f"S{step:02d}",
                                  "command", "active" if open_step else "completed",
                                  None if open_step else 0, 0.0005, _ts(clock),
                                  None if open_step else _ts(clock + 0.5),
                                  "" if open_step and index < GATED else None))
                    clock += 1
                iters.append((iter_id, node, run_id, number, "active" if last_iter else
                              "completed", _ts(iter_start), None if last_iter else _ts(clock)))
            end = None if live else _ts(clock)
            reason = "" if live else ("Exited at iteration 1.50" if status == "exited"
                                      else f"Reached max iterations ({ITERS})")
            con.execute("INSERT INTO runs (run_id, node, agent, max_cost, status, exit_code, "
                        "metadata, started_at, ended_at) VALUES (?, ?, 'command', 5.0, ?, ?, "
                        "?, ?, ?)", (run_id, node, "active" if live else status,
                                     None if live else (1 if status == "exited" else 0),
                                     reason, _ts(run_start), end))
            con.executemany("INSERT INTO iterations (iter_id, node, run_id, iter, agent, "
                            "status, started_at, ended_at) VALUES (?, ?, ?, ?, 'command', ?, "
                            "?, ?)", iters)
            con.executemany("INSERT INTO steps (step_id, node, iter_id, run_id, step, "
                            "step_name, agent, status, exit_code, cost, started_at, ended_at, "
                            "approved) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", steps)
            counts["nodes"] += 1
            counts["steps"] += len(steps)
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("ANALYZE")
    finally:
        con.close()
    return counts


def _write_event(box: Sandbox, serial: int) -> None:
    con = sqlite3.connect(box.db, timeout=30.0)
    try:
        con.execute("INSERT INTO events (node, event, actor, status, metadata, created_at) "
                    "VALUES (?, 'note', 'bench', 'completed', ?, ?)",
                    (f"{ROOT}.t001", f"bench {serial}", _ts(10_000_000 + serial)))
        con.commit()
    finally:
        con.close()


def _write_message(box: Sandbox, serial: int) -> None:
    """A radio message from a node: a row the dashboard shows (its radio feed)."""
    con = sqlite3.connect(box.db, timeout=30.0)
    try:
        con.execute("INSERT INTO messages (message_uuid, node, channel, sender, priority, "
                    "subject, data, created_at) VALUES (?, ?, 'outbox', ?, 5, ?, '', ?)",
                    (f"bench-{os.getpid()}-{serial}", f"{ROOT}.t002", f"{ROOT}.t002",
                     f"bench note {serial}", _ts(10_000_000 + serial)))
        con.commit()
    finally:
        con.close()


async def _paint(box: Sandbox) -> tuple[float, float]:
    """Milliseconds (wall, CPU) from a new app to its first snapshot applied."""
    from fractal.tree import Tree
    from fractal.tui.app import Dashboard

    started, cpu = time.monotonic(), time.process_time()
    app = Dashboard(Tree(repo=box.repo, root=ROOT), live=False)
    async with app.run_test(size=(160, 50)) as pilot:
        while app.painted is None:
            await pilot.pause(0.01)
        return (app.painted - started) * 1e3, (time.process_time() - cpu) * 1e3


async def _measure(box: Sandbox
                   ) -> tuple[list[tuple[float, float]], list[float], list[float],
                              list[float], list[float]]:
    from fractal.tree import Tree
    from fractal.tui.app import Dashboard

    paints = [await _paint(box) for _ in range(PAINTS)]
    app = Dashboard(Tree(repo=box.repo, root=ROOT), live=False)
    refresh: list[float] = []
    refresh_cpu: list[float] = []
    direct: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        while app.painted is None:
            await pilot.pause(0.01)
        while app.builder._backlog:  # the ended runs' spends, summed a batch per read
            app.apply(app.builder.build())
            await pilot.pause()
        for serial in range(REFRESHES):
            _write_event(box, serial)
            t0 = time.perf_counter()
            snap = app.builder.build()
            app.apply(snap)
            await pilot.pause()
            direct.append((time.perf_counter() - t0) * 1e3)
    idle = Dashboard(Tree(repo=box.repo, root=ROOT), live=True)
    async with idle.run_test(size=(160, 50)) as pilot:
        while idle.painted is None or idle.builder._backlog:  # the spends summed first
            await pilot.pause(0.1)
        await pilot.pause(1.5)
        for serial in range(REFRESHES):  # the live path: watchdog -> build thread -> apply
            seen = idle.applied
            t0, c0 = time.perf_counter(), time.process_time()
            _write_message(box, serial)
            deadline = time.monotonic() + 10
            while idle.applied == seen:
                if time.monotonic() > deadline:
                    raise BenchError("the dashboard never showed a new radio message")
                await asyncio.sleep(0.002)
            idle.screen._on_timer_update()  # lay out and render what the apply changed
            refresh.append((time.perf_counter() - t0) * 1e3)
            refresh_cpu.append((time.process_time() - c0) * 1e3)
            await pilot.pause(0.3)  # the watchdog's late events for this write settle
        cpu: list[float] = []
        for _ in range(IDLE_WINDOWS):
            cpu0, wall0 = time.process_time(), time.monotonic()
            await pilot.pause(IDLE_S)
            cpu.append((time.process_time() - cpu0) / (time.monotonic() - wall0) * 100)
    return paints, refresh, refresh_cpu, cpu, direct


def run(box: Sandbox, log: object) -> tuple[list[Row], list[str]]:
    """Seed, measure; return table rows and footer lines."""
    say = log if callable(log) else print
    t0 = time.monotonic()
    counts = seed(box)
    took = time.monotonic() - t0
    say(f"dashboard: seeded {counts['steps']:,} steps across {counts['nodes']} nodes in "
        f"{took:.0f}s")
    os.environ.update({k: v for k, v in box.env.items() if k in ("HOME", "TMUX_TMPDIR")})
    first, refresh, refresh_cpu, cpu, direct = asyncio.run(_measure(box))
    for _ in range(2):
        box.timed_cli(["inbox", "--json"])
    raw = [box.timed_cli(["inbox", "--json"]) * 1e3 for _ in range(INBOX_RUNS)]
    # An installed fractal has its bytecode compiled; a shell with PYTHONDONTWRITEBYTECODE
    # recompiles every module on each run. Measure the installed case with a private cache.
    saved = dict(box.env)
    box.env.pop("PYTHONDONTWRITEBYTECODE", None)
    box.env["PYTHONPYCACHEPREFIX"] = str(box.base / "pycache")
    try:
        for _ in range(2):
            box.timed_cli(["inbox", "--json"])
        inbox, inbox_cpu = [], []
        for _ in range(INBOX_RUNS):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            inbox.append(box.timed_cli(["inbox", "--json"]) * 1e3)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            inbox_cpu.append((after.ru_utime + after.ru_stime - before.ru_utime
                              - before.ru_stime) * 1e3)
    finally:
        box.env.clear()
        box.env.update(saved)
    load = os.getloadavg()[0]
    rows = [section(f"Dashboard and inbox: {counts['nodes']:,} nodes, {counts['steps']:,} "
                    f"step rows ({ACTIVE} active, {GATED} at a gate, {EXITED} exited)"),
            Row("fractal open: start -> first paint (headless, in process)",
                [w for w, _ in first], target="< 1 s"),
            Row("  the same, CPU time (up to the first paint)", [c for _, c in first]),
            Row("fractal open: row written -> watchdog wake -> snapshot rebuilt, applied, "
                "rendered", refresh, target="< 150 ms median"),
            Row("  the same, CPU time of the dashboard's process (all threads)",
                refresh_cpu),
            Row("  row written -> build and apply on the UI loop, then Pilot's idle wait",
                direct),
            Row(f"fractal open: idle CPU, {IDLE_WINDOWS} x {IDLE_S:.0f} s, nothing written",
                cpu, unit="%", target="< 2 % of one core"),
            Row("fractal inbox --json (subprocess, bytecode cached)", inbox,
                target="< 300 ms"),
            Row("  the same, CPU time of the subprocess", inbox_cpu),
            Row("fractal inbox --json (subprocess, no bytecode cache)", raw)]
    return rows, [f"dashboard ledger: seeded in {took:.0f} s with sqlite3 (no worktrees); "
                  f"1-minute load average {load:.1f} after the runs"]
