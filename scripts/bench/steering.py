"""The commands people type and the supervisor's footprint, each beside the reference.

One sandbox, one pool of ``samples`` nodes whose agent holds (sleeps) in its step:

- the steering verbs on running nodes (``stop``, ``finish``, ``finish --cancel``,
  ``pause``, ``kill``, ``approve`` at a gate, ``stop`` during the inter-iteration sleep),
  each sample taken right after a ``node status`` of the same node, so the ratio to
  ``node status`` is measured under the same load;
- ``node start`` and ``node resume``: spawn -> the prompt returns;
- the iteration boundary (last step's agent exit -> next iteration's first spawn, empty
  setup) and the supervisor's memory over a 200-iteration run (VmHWM after iteration 20
  and at the end);
- ``idle`` nodes asleep between iterations, then the same number waiting at an approval
  gate: the CPU their supervisors burn over ``window`` seconds (``/proc/<pid>/stat``).

The figures in ``REFERENCE`` were measured with the public reference implementation on
this kind of machine (2 cores); docs/benchmarks.md says what each one means.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.latency import GATED, Latency
from bench.memory import watch_memory
from bench.report import Row, section
from bench.sandbox import ROOT, BenchError, Sandbox
from bench.trace import intervals, read_trace
from bench.verbs import until

Log = Callable[[str], None]
MEMORY_ITERATIONS, EARLY_AT = 200, 20
BOUNDARY_ITERATIONS = 30
REFERENCE = {"start": "461 ms", "resume": "601 ms", "stop": "580 ms",
             "stop (loop sleeping)": "442 ms", "rss": "37.2 MiB", "boundary": "~40 ms"}
STEERING = ("stop", "finish", "finish --cancel", "pause", "kill", "approve",
            "stop (loop sleeping)")


class Steering(Latency):
    """Times the typed commands on the pool (``Latency``'s pool and helpers)."""

    def __init__(self, box: Sandbox, samples: int) -> None:
        super().__init__(box, samples)
        self.ms: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def _timed(self, label: str, *args: str) -> None:
        """Wall ms of ``fractal ARGS`` into ``ms``; the CPU ms it and the children it reaped
        (git, the tmux client) used into ``cpu`` (a supervisor it hosts is tmux's child)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        self.box.cli(*args, timeout=120)
        self.ms.setdefault(label, []).append((time.perf_counter() - started) * 1e3)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        self.cpu.setdefault(label, []).append(used * 1e3)

    def _status_then(self, label: str, name: str, *verb: str) -> None:
        """``node status NAME`` (timed as the baseline), then the verb (timed)."""
        self._timed("status", "node", "status", name)
        self.ms.setdefault(f"status before {label}", []).append(self.ms["status"][-1])
        self._timed(label, "node", *verb)

    def starts(self, names: list[str], *verb: str) -> dict[str, int]:
        """``fractal node VERB NAME`` for each name in turn (at once, a slow start can time
        out on the tree lock); each node's newest step id before. Raises BenchError."""
        before = {name: self._max_step(name) for name in names}
        for name in names:
            self.box.cli("node", verb[0], name, *verb[1:], timeout=180)
        return before

    def measure(self, log: Log) -> dict[str, list[float]]:
        """Every command's wall times (ms) by label (also kept in ``ms`` as they come, so a
        BenchError part-way leaves what was measured). Raises BenchError."""
        for name in self.pool:
            self.box.add_custom_node(name, {"01-H.md": "BENCH-HOLD\n"}, "--no-sync",
                                     "--max-iters", "1000", "--agent", self.agent)
        log("steering: node start")
        for name in self.pool:
            self._timed("start", "node", "start", name)
        for name in self.pool:
            self.d.running(name)
        log("steering: stop, finish, finish --cancel, pause with the agent in flight")
        for name in self.pool:
            self._status_then("stop", name, "stop", name)
            self._status_then("finish", name, "finish", name)
            self._status_then("finish --cancel", name, "finish", "--cancel", name)
        self._settle_all(self.pool, kill=True)  # the queued stops would end the next run
        for name in self.pool:
            self.box.cli("node", "start", name, "--continue", timeout=180)
            self.d.running(name)
            self._status_then("pause", name, "pause", name)
        for name in self.pool:
            self.d.supervisor_gone(name)
        log("steering: node resume, then kill with the agent in flight")
        for name in self.pool:
            self._timed("resume", "node", "resume", name)
        for name in self.pool:
            self.d.running(name)
            self._status_then("kill", name, "kill", name)
        self._settle_all(self.pool, kill=False)
        log("steering: approve at a gate")
        self._configure({"01-GATE.md": GATED, "02-NEXT.md": "BENCH-HOLD\n"})
        before = self.starts(self.pool, "start", "--continue")
        for name in self.pool:
            self._gate(name, before[name])
            self._status_then("approve", name, "approve", name)
        self._settle_all(self.pool, kill=True)
        log("steering: stop during the inter-iteration sleep")
        self._configure({"01-A.md": "noop\n"}, sleep="1h")
        before = self.starts(self.pool, "start", "--continue")
        for name in self.pool:
            self._napping(name, before[name])
            self._status_then("stop (loop sleeping)", name, "stop", name)
        self._settle_all(self.pool, kill=False)
        return self.ms


def _supervisor_ticks(box: Sandbox, names: list[str]) -> int:
    """utime + stime (clock ticks) of the live supervisors of ``names``."""
    total = 0
    for name in names:
        pid = box.node_state(name)[1]
        if pid is None:
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


def _usage_waiting(lat: Steering, name: str, _after: int) -> None:
    """The node's newest ``usage_wait`` event is ``started``: it waits for the window."""
    until(lambda: lat.d.one("SELECT 1 FROM events WHERE node = ? AND event = 'usage_wait' "
                            "AND status = 'started' AND event_id = (SELECT MAX(event_id) "
                            "FROM events WHERE node = ? AND event = 'usage_wait')",
                            f"{ROOT}.{name}", f"{ROOT}.{name}"), 60,
          f"{name} to wait for the usage window")


IDLE_WAITS = ("sleeping", "approval", "usage window")


def idle_cpu(lat: Steering, count: int, window: float, log: Log,
             waits: tuple[str, ...] = IDLE_WAITS) -> dict[str, float]:
    """Percent of one core the supervisors of ``count`` nodes used over ``window`` seconds
    in each of ``waits``: asleep between iterations, waiting at an approval gate, waiting
    for a usage window (each agent reports the command protocol's closed window, reset an
    hour ahead; the nodes share one credential, as one account's nodes do, so the first
    report closes the window for all and the others wait before they launch). On ``lat``'s
    sandbox, with its agent; its pool becomes these nodes."""
    box = lat.box
    names = [f"idle{n}" for n in range(1, count + 1)]
    lat.pool = names
    for name in names:
        box.add_custom_node(name, {"01-A.md": "noop\n"}, "--no-sync", "--max-iters", "1000",
                            "--agent", lat.agent)
    out: dict[str, float] = {}
    hz = os.sysconf("SC_CLK_TCK")
    cases: tuple[tuple[str, dict[str, str], dict[str, object], Callable[[str, int], None]],
                 ...] = (
        ("sleeping", {"01-A.md": "noop\n"}, {"sleep": "1h"}, lat._napping),
        ("approval", {"01-GATE.md": GATED}, {}, lat._at_gate),
        ("usage window", {"01-U.md": "BENCH-USAGE\n"}, {},
         lambda name, after: _usage_waiting(lat, name, after)))
    for label, steps, config, reach in cases:
        if label not in waits:
            continue
        lat._configure(steps, **config)
        log(f"idle CPU: {count} nodes {label}")
        verb = ("start",) if not out else ("start", "--continue")  # then they were killed
        before = lat.starts(names, *verb)
        for name in names:
            reach(name, before[name])
        time.sleep(2.0)  # past the boot and the wait's first reads
        first = _supervisor_ticks(box, names)
        time.sleep(window)
        used = _supervisor_ticks(box, names) - first
        out[label] = 100.0 * used / hz / window
        lat._settle_all(names, kill=True)
        for name in names:
            if lat.d.status(name) not in ("killed", "stopped", "completed", "exited"):
                raise BenchError(f"{name} did not settle after the idle window")
    return out


def footprint(box: Sandbox, log: Log) -> tuple[list[float], tuple[int, int | None]]:
    """(iteration-boundary ms, (VmHWM KiB at the end, after EARLY_AT iterations))."""
    box.add_node("edge", steps=1, max_iters=BOUNDARY_ITERATIONS)
    trace = box.base / "trace-edge.log"
    log(f"iteration boundary: {BOUNDARY_ITERATIONS} iterations x 1 no-op step")
    box.start("edge", trace)
    if box.wait_settled("edge", 120) != "completed":
        raise BenchError("the boundary run did not complete")
    rows = box.sql("SELECT step_id, iter_id FROM steps WHERE node = ?", f"{ROOT}.edge")
    gaps = intervals(read_trace(trace), {int(str(r[0])): int(str(r[1])) for r in rows}).iter_gap
    log(f"supervisor memory: {MEMORY_ITERATIONS} iterations x 1 no-op step")
    box.add_node("mem", steps=1, max_iters=MEMORY_ITERATIONS)
    box.start("mem", None)
    memory = watch_memory(box, "mem", early_at=EARLY_AT, timeout=400)
    return gaps, (memory.hwm_kib, memory.early_hwm_kib)


def compile_bytecode() -> bool:
    """Write the ``fractal`` package's bytecode (``__pycache__``), as an installed package
    has it: with ``PYTHONDONTWRITEBYTECODE`` set and no cache, every timed command would
    compile its modules from source first. True when every module compiled."""
    import compileall

    import fractal

    return bool(compileall.compile_dir(str(Path(fractal.__file__).parent), quiet=1))


def run(keep: bool, samples: int, idle: int, window: float, log: Log,
        waits: tuple[str, ...] = IDLE_WAITS) -> tuple[list[Row], list[str]]:
    """The whole table. ``idle`` 0 skips the idle-CPU part; ``waits``: its cases."""
    compiled = compile_bytecode()
    box = Sandbox.create()
    try:
        bench = Steering(box, samples)
        try:
            bench.measure(log)
        except (BenchError, subprocess.TimeoutExpired) as exc:  # what was measured stands
            log(f"steering: stopped early: {exc}")
        ms = bench.ms
        try:
            gaps, (hwm, early) = footprint(box, log)
        except (BenchError, subprocess.TimeoutExpired) as exc:
            log(f"footprint: stopped early: {exc}")
            gaps, hwm, early = [], 0, None
        try:
            cpu = idle_cpu(bench, idle, window, log, waits) if idle else {}
        except (BenchError, subprocess.TimeoutExpired) as exc:  # the others still stand
            log(f"idle CPU: could not measure: {exc}")
            cpu = {}
    finally:
        box.close(keep=keep)
        if keep:
            log(f"kept {box.base}")
    status = statistics.median(ms["status"]) if ms.get("status") else 0.0
    bound = f"<= {1.5 * status:.0f} ms (1.5x status), < 250 ms"
    rows = [section(f"Typed commands: subprocess wall time, a pool of {samples} running "
                    "nodes, each verb right after a `node status` of the same node"),
            Row("fractal node status (the baseline)", ms.get("status", []))]
    for label in STEERING:
        times, paired = ms.get(label, []), ms.get(f"status before {label}", [])
        ratio = (f"{statistics.median(times) / statistics.median(paired):.2f}x"
                 if times and paired else "?")
        rows.append(Row(f"fractal node {label} ({ratio} its status)", times, target=bound,
                        reference=REFERENCE.get(label, ""), note="" if times else "n/a"))
    rows += [Row("fractal node start (prompt returns)", ms.get("start", []),
                 target="< 400 ms", reference=REFERENCE["start"]),
             Row("fractal node resume (prompt returns)", ms.get("resume", []),
                 target="< 400 ms", reference=REFERENCE["resume"]),
             section("The same commands' CPU time (the command and the git and tmux clients "
                     "it ran; less sensitive to other load than wall time)")]
    rows += [Row(f"fractal node {label} (CPU)", bench.cpu[label])
             for label in ("status", *STEERING, "start", "resume") if bench.cpu.get(label)]
    rows += [section("Supervisor footprint"),
             Row("iteration boundary: last agent exit -> next first spawn", gaps,
                 target="< 15 ms", reference=REFERENCE["boundary"], note="" if gaps else "n/a")]
    if hwm:
        rows.append(Row(f"peak RSS over {MEMORY_ITERATIONS} iterations (VmHWM)",
                        [hwm / 1024.0], unit="MiB", peak=True, count=1, target="< 35 MiB",
                        reference=REFERENCE["rss"]))
    if hwm and early is not None:
        rows.append(Row(f"  growth, iteration {EARLY_AT} -> {MEMORY_ITERATIONS} (VmHWM)",
                        [(hwm - early) / 1024.0], unit="MiB", peak=True, count=1,
                        target="0 MiB"))
    for label, pct in cpu.items():
        rows.append(Row(f"{idle} nodes {label}: supervisors' CPU over {window:.0f} s", [],
                        note=f"{pct:.2f} % of a core", target="< 1 %"))
    return rows, [f"steering: {samples} samples per verb; status median {status:.0f} ms; "
                  f"bytecode {'compiled first' if compiled else 'NOT all compiled'}; "
                  f"load average {os.getloadavg()[0]:.1f} at the end"]
