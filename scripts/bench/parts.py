"""The bench's later sections, each in a sandbox of its own: verb-to-reaction latency, the
read commands on a 100,000-step ledger, 20 nodes started at once, and nodes waiting out
a usage window (what each
number means: docs/benchmarks.md). Each returns table rows and footer lines.
"""

from __future__ import annotations

from collections.abc import Callable

from bench import bigdb, dashboard, throughput, usagewait
from bench.latency import Latency
from bench.report import Row, section
from bench.sandbox import ROOT, Sandbox

Log = Callable[[str], None]
REACTION_TARGET = "< 300 ms, max < 1 s"
READ_RUNS, READ_WARMUP = 10, 2
READS: dict[str, list[str]] = {
    "fractal --help": ["--help"],
    "fractal node status n01": ["node", "status", "n01"],
    "fractal node list": ["node", "list"],
    "fractal node activity --limit 50": ["node", "activity", "--limit", "50"],
}
READ_TARGETS = {"fractal --help": "< 150 ms"}
COST_READ = ("fractal node cost spent", ["node", "cost", "spent"])


def _sandboxed(keep: bool, log: Log, body: Callable[[Sandbox], tuple[list[Row], list[str]]]
               ) -> tuple[list[Row], list[str]]:
    box = Sandbox.create()
    try:
        return body(box)
    finally:
        box.close(keep=keep)
        if keep:
            log(f"kept {box.base}")


def latency(keep: bool, samples: int, log: Log) -> tuple[list[Row], list[str]]:
    """Verb exit -> reaction for each verb at each wait point, and the verbs' own times."""
    def body(box: Sandbox) -> tuple[list[Row], list[str]]:
        bench = Latency(box, samples)
        cells = bench.run(log)
        rows = [section(f"Verb -> reaction: verb's process exited -> reaction seen, a pool "
                        f"of {samples} nodes (negative: it reacted before the verb exited)")]
        for cell in cells:
            handover = not cell.signal
            rows.append(Row(f"{cell.verb} @ {cell.point}: {cell.reaction}", cell.samples,
                            target="" if handover else REACTION_TARGET))
            if not handover:
                rows.append(Row("  of which signal row written -> reaction", cell.signal))
        rows.append(section("Verb wall time: the verb's own process, spawn -> exit"))
        rows += [Row(f"fractal node {verb}", ms) for verb, ms in sorted(bench.verb_ms.items())]
        worst = max(max(c.samples) for c in cells if c.signal)
        foot = [f"verb -> reaction: {sum(len(c.samples) for c in cells)} samples in "
                f"{len(cells)} cells; the largest verb-exit -> reaction is {worst:.0f} ms"]
        return rows, foot
    return _sandboxed(keep, log, body)


def reads(keep: bool, log: Log) -> tuple[list[Row], list[str]]:
    """The read commands on a tree whose database holds 100,000 step rows, 50 nodes."""
    def body(box: Sandbox) -> tuple[list[Row], list[str]]:
        counts, took = bigdb.seed_timed(box)
        log(f"reads: seeded {counts['steps']:,} step rows across {counts['nodes']} nodes in "
            f"{took:.1f}s; {READ_RUNS} runs per command")
        commands = dict(READS)
        has_cost = bigdb.has_command(box, COST_READ[1][:2])
        if has_cost:
            commands[COST_READ[0]] = COST_READ[1]
        times = bigdb.timed_reads(box, commands, READ_RUNS, READ_WARMUP)
        rows = [section(f"CLI wall time on a big ledger: {counts['steps']:,} step rows, "
                        f"{counts['iterations']:,} iterations, {counts['runs']} runs, "
                        f"{counts['nodes']} nodes ({READ_WARMUP} warm-ups not counted)")]
        rows += [Row(label, ms, target=READ_TARGETS.get(label, "< 300 ms"))
                 for label, ms in times.items()]
        if not has_cost:
            rows.append(Row(COST_READ[0], [], note="n/a (a read of the budget ledger)", target="< 300 ms"))
        foot = [f"big ledger: seeded in {took:.1f} s with sqlite3 into the migrated database "
                f"of {ROOT} (nodes without worktrees)"]
        return rows, foot
    return _sandboxed(keep, log, body)


def many_nodes(keep: bool, log: Log) -> tuple[list[Row], list[str]]:
    """20 nodes started at once: wall time, rows per second, lock errors."""
    def body(box: Sandbox) -> tuple[list[Row], list[str]]:
        log(f"throughput: preparing {throughput.NODES} nodes")
        throughput.prepare(box)
        log(f"throughput: {throughput.NODES} nodes x {throughput.ITERATIONS} iterations x "
            f"{throughput.STEPS} no-op steps, started at once")
        result = throughput.run(box)
        steps = throughput.NODES * throughput.ITERATIONS * throughput.STEPS
        rows = [section(f"Throughput: {throughput.NODES} nodes x {throughput.ITERATIONS} "
                        f"iterations x {throughput.STEPS} no-op steps (--no-sync), started "
                        "at once"),
                Row("total wall time: first start -> last node settled", [],
                    note=f"{result.seconds:.1f} s"),
                Row("rows written per second (runs, iterations, steps, events)", [],
                    note=f"{result.rows_per_second:.0f} rows/s", count=result.rows),
                Row("steps per second", [], note=f"{steps / result.seconds:.1f} steps/s",
                    count=steps),
                Row("database lock errors", [], note=str(result.lock_errors), target="0")]
        statuses = sorted(set(result.statuses.values()))
        foot = [f"throughput: {result.rows} rows written; final node statuses {statuses}"]
        return rows, foot
    return _sandboxed(keep, log, body)


def dashboard_part(keep: bool, log: Log) -> tuple[list[Row], list[str]]:
    """``fractal open`` (first paint, refresh, idle CPU) and ``fractal inbox`` on a ledger
    of 1,000 nodes and 1,000,000 step rows."""
    return _sandboxed(keep, log, lambda box: dashboard.run(box, log))


def web_part(keep: bool, log: Log) -> tuple[list[Row], list[str]]:
    """``fractal open --web`` with one headless chromium attached, on 50 nodes: memory and
    CPU of the server, the served dashboard and the browser (``bench.web``)."""
    from bench import web  # imports tests/browser.py: only for this part

    return _sandboxed(keep, log, lambda box: web.run(box, log))


def usage_wait(keep: bool, samples: int, log: Log) -> tuple[list[Row], list[str]]:
    """Nodes waiting out a usage window: their supervisors' CPU and the resume delay."""
    def body(box: Sandbox) -> tuple[list[Row], list[str]]:
        figures = usagewait.measure(box, samples, log)
        return usagewait.rows(figures, samples), usagewait.footer(figures)
    return _sandboxed(keep, log, body)
