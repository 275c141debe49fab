"""``make bench``: measure the supervisor's overhead and memory, the CLI's latency, how
fast the loop reacts to the steering verbs, and many nodes at once.

Builds a throwaway tree of 10 nodes whose agent is a no-op script, in a temp HOME with a
private tmux server, runs two nodes through the real ``fractal node start``, reads the
supervisor's ``FRACTAL_TRACE`` timing points, samples its memory, times three CLI
commands; then, each in a sandbox of its own (``bench.parts``), times pause, stop,
approve and finish at every wait point, the read commands on a 100,000-step ledger,
20 nodes started at once, and nodes waiting out a usage window. It prints one table of
medians and maxima with the targets beside them, and never passes or fails on the
numbers (exit 1 only when the bench itself could not run). What each number means: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import ledger, parts, postgres, steering
from bench.memory import watch_memory
from bench.report import Row, render, section
from bench.sandbox import ROOT, BenchError, Sandbox
from bench.trace import Intervals, intervals, read_trace

ITERATIONS, STEPS = 4, 25  # the overhead run
MEMORY_ITERATIONS, EARLY_AT = 200, 20  # the memory run; growth is checked at EARLY_AT
IDLE_NODES = 8  # with the two measured nodes: a tree of 10
CLI_RUNS, CLI_WARMUP = 15, 2
USAGE_NODES = 3  # nodes waiting out a usage window at once
CLI_COMMANDS: dict[str, list[str]] = {
    "fractal --help": ["--help"],
    "fractal node status steps": ["node", "status", "steps"],
    "fractal node list": ["node", "list"],
}
CLI_TARGETS = {"fractal --help": ("< 150 ms", "205 ms"),
               "fractal node status steps": ("< 200 ms", "250 ms")}
COST_COMMANDS: dict[str, list[str]] = {
    f"fractal node cost spent {ledger.TOP}": ["node", "cost", "spent", ledger.TOP],
    f"fractal node cost spent {ledger.TOP} --run": ["node", "cost", "spent", ledger.TOP, "--run"],
}


def _log(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def traced_run(box: Sandbox, name: str, timeout: float) -> Intervals:
    """Start node ``name`` with a trace file, wait until it completes, return its intervals.

    Raises BenchError when the run or one of its steps did not complete.
    """
    trace = box.base / f"trace-{name}.log"
    box.start(name, trace)
    status = box.wait_settled(name, timeout)
    if status != "completed":
        raise BenchError(f"node {name} ended {status}, not completed; see "
                         f"{box.repo}/.worktrees/{ROOT}.{name} (rerun with --keep)")
    rows = box.sql("SELECT step_id, iter_id, status FROM steps WHERE node = ?", f"{ROOT}.{name}")
    failed = [r for r in rows if r[2] != "completed"]
    if failed:
        raise BenchError(f"{len(failed)} step(s) of {name} did not complete: {failed[:3]}")
    iteration_of = {int(str(r[0])): (int(str(r[1])) if r[1] is not None else None) for r in rows}
    return intervals(read_trace(trace), iteration_of)


def time_cli(box: Sandbox, commands: dict[str, list[str]] = CLI_COMMANDS) -> dict[str, list[float]]:
    """Milliseconds of each CLI command, runs interleaved round-robin after warm-ups."""
    for args in commands.values():
        for _ in range(CLI_WARMUP):
            box.timed_cli(args)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(CLI_RUNS):
        for label, args in commands.items():
            times[label].append(box.timed_cli(args) * 1e3)
    return times


def run(keep: bool, samples: int = 5, idle: int = 50, window: float = 60.0) -> str:
    """Build the sandboxes, measure, clean up; return the report text. ``samples``: per
    verb-to-reaction cell. Raises BenchError."""
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    box = Sandbox.create()
    try:
        _log(f"building a tree of {IDLE_NODES + 2} nodes in {box.base}")
        box.add_node("steps", steps=STEPS, max_iters=ITERATIONS)
        box.add_node("mem", steps=1, max_iters=MEMORY_ITERATIONS)
        for number in range(1, IDLE_NODES + 1):
            box.cli("node", "init", f"idle{number}", "--max-iters", "1")
        _log(f"overhead run: {ITERATIONS} iterations x {STEPS} no-op steps")
        steps = traced_run(box, "steps", timeout=120)
        _log(f"memory run: {MEMORY_ITERATIONS} iterations x 1 no-op step")
        trace = box.base / "trace-mem.log"
        box.start("mem", trace)
        memory = watch_memory(box, "mem", early_at=EARLY_AT, timeout=240)
        rows = box.sql("SELECT step_id, iter_id FROM steps WHERE node = ?", f"{ROOT}.mem")
        mem = intervals(read_trace(trace), {int(str(r[0])): int(str(r[1])) for r in rows})
        _log(f"CLI timings: {CLI_RUNS} runs each")
        cli = time_cli(box)
        _log(f"cost reads: {ledger.STEPS} synthetic step rows across 50 nodes")
        rows = ledger.build(box.db, ROOT)
        costs = time_cli(box, COST_COMMANDS)
    finally:
        box.close(keep=keep)
        if keep:
            _log(f"kept {box.base}")
    mib = 1024.0
    table = [
        section(f"Supervisor overhead: no-op agent, {ITERATIONS} iterations x {STEPS} steps, "
                "--no-sync, empty setup.sh"),
        Row("per step: agent exit seen -> next agent spawned", steps.gap,
            target="< 10 ms", reference="~14 ms"),
        Row("  before start: step opened -> agent spawned", steps.before, reference="~7.5 ms"),
        Row("  after end: agent exit seen -> step row closed", steps.after, reference="~3.5 ms"),
        Row("  between rows: row closed -> next row opened", steps.between, reference="~3 ms"),
        Row("per iteration: last agent exit -> next first spawn", steps.iter_gap),
        Row("  of which row closed -> next row opened", steps.iter_between),
        Row("(the agent itself: spawned -> exit seen)", steps.agent),
        section(f"Supervisor memory: {MEMORY_ITERATIONS} iterations x 1 no-op step"),
        Row("peak RSS: VmHWM, last read before exit", [memory.hwm_kib / mib], unit="MiB",
            target="< 40 MB", reference="38 MB", peak=True, count=len(memory.rss_kib)),
        *([Row(f"  VmHWM after {EARLY_AT} iterations", [memory.early_hwm_kib / mib],
               unit="MiB", peak=True, count=1)] if memory.early_hwm_kib else []),
        Row("  VmRSS samples", [k / mib for k in memory.rss_kib], unit="MiB"),
        Row("per iteration: agent exit seen -> next agent spawned", mem.iter_gap),
        Row("  of which row closed -> next row opened", mem.iter_between),
        section(f"CLI wall time: subprocess, tree of {IDLE_NODES + 2} nodes, "
                f"{CLI_WARMUP} warm-up runs not counted"),
        *(Row(label, cli[label], target=CLI_TARGETS.get(label, ("", ""))[0],
              reference=CLI_TARGETS.get(label, ("", ""))[1]) for label in CLI_COMMANDS),
        section(f"Cost reads: {rows:,} step rows across 50 nodes (one run each, chained), "
                "the same tree"),
        *(Row(label, costs[label], target="< 300 ms") for label in COST_COMMANDS),
    ]
    notes: list[str] = []
    for more, lines in (parts.latency(keep, samples, _log), parts.reads(keep, _log),
                        parts.many_nodes(keep, _log), parts.dashboard_part(keep, _log),
                        parts.usage_wait(keep, USAGE_NODES, _log), postgres.run(keep, _log),
                        steering.run(keep, samples, idle, window, _log)):
        table += more
        notes += lines
    head = (f"fractal bench: {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")
    foot = (f"memory: {len(memory.rss_kib)} reads of /proc/<pid>/status every 50 ms over "
            f"{memory.iterations} iterations; the last read came {memory.tail_ms:.0f} ms "
            f"before the process was found gone\n"
            + "".join(f"{line}\n" for line in notes) +
            f"1-minute load average: {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} "
            f"at the end (above 0.5 or so, other work is sharing the cores)\n"
            f"bench wall time: {time.monotonic() - started:.0f} s")
    return f"{head}\n\n{render(table)}\n\n{foot}"


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (1 when the bench could not run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", action="store_true",
                        help="keep the sandbox directory (tree, traces) for inspection")
    parser.add_argument("--latency-samples", type=int, default=5, metavar="N",
                        help="nodes (samples) per verb-to-reaction cell (default 5)")
    parser.add_argument("--only", choices=["dashboard", "usagewait", "steering", "web",
                                          "postgres"],
                        default=None,
                        help="run one part alone (dashboard: fractal open and fractal inbox "
                             "on 1,000 nodes / 1,000,000 steps; usagewait: nodes waiting "
                             "out a usage window; steering: the typed commands, start and "
                             "resume, the supervisor's footprint; web: fractal open --web "
                             "with a headless chromium attached, on 50 nodes; postgres: the "
                             "read commands on 1,000 nodes, SQLite and PostgreSQL side by side)")
    parser.add_argument("--idle-nodes", type=int, default=50, metavar="N",
                        help="nodes asleep (then at a gate) for the idle-CPU figure; 0 skips "
                             "it (default 50)")
    parser.add_argument("--idle-window", type=float, default=60.0, metavar="S",
                        help="seconds the idle CPU is measured over (default 60)")
    parser.add_argument("--idle-waits", default=",".join(steering.IDLE_WAITS), metavar="LIST",
                        help="which waits the idle-CPU part measures, comma-separated "
                             f"(default: {','.join(steering.IDLE_WAITS)})")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # clean up on TERM as on Ctrl-C
    signal.signal(signal.SIGINT, _interrupt)  # even when started with INT ignored
    try:
        if args.only == "postgres":
            rows, notes = postgres.run(args.keep, _log)
            print(render(rows) + "\n\n" + "\n".join(notes))
        elif args.only in ("dashboard", "usagewait"):
            rows, notes = (parts.dashboard_part(args.keep, _log) if args.only == "dashboard"
                           else parts.usage_wait(args.keep, USAGE_NODES, _log))
            print(render(rows) + "\n\n" + "\n".join(notes))
        elif args.only == "web":
            rows, notes = parts.web_part(args.keep, _log)
            print(render(rows) + "\n\n" + "\n".join(notes))
        elif args.only == "steering":
            waits = tuple(w.strip() for w in args.idle_waits.split(",") if w.strip())
            unknown = sorted(set(waits) - set(steering.IDLE_WAITS))
            if unknown:
                parser.error(f"--idle-waits: unknown {', '.join(unknown)} (choose from "
                             f"{', '.join(steering.IDLE_WAITS)})")
            rows, notes = steering.run(args.keep, max(1, args.latency_samples),
                                       max(0, args.idle_nodes), args.idle_window, _log, waits)
            print(render(rows) + "\n\n" + "\n".join(notes))
        else:
            print(run(args.keep, max(1, args.latency_samples), max(0, args.idle_nodes),
                      args.idle_window))
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted (the sandbox was cleaned up)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
