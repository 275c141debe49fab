"""A usage-window wait: what a waiting supervisor costs and how fast it resumes.

``samples`` nodes start at once, each on a credential of its own (its own
``CLAUDE_CONFIG_DIR`` in the launch environment), so their waits do not interact. Each
node's agent reports a closed window on its first launch (``{"type": "usage_limit",
...}``, the command protocol) with a reset ``RESET_IN`` seconds ahead, and exits 0 on the
next. The bench then reads each supervisor's CPU time (user + system, psutil) over
``CPU_WINDOW`` seconds from the start of its wait, and the instant the agent was launched again against
the instant the loop was due to re-enter (the reset plus the resume jitter).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.report import Row, section
from bench.sandbox import ROOT, BenchError, Sandbox

CPU_WINDOW = 60.0  # s of wait over which each supervisor's CPU time is read
RESET_IN = CPU_WINDOW + 60.0  # s from a node's first launch to its reset (starts are slow)
JITTER = 5.0  # s after the reset the loop re-enters (fractal.domain.usage.windows.RESUME_JITTER)
AGENT = """#!/bin/sh
cat >/dev/null
dir="$BENCH_USAGE/$NODE_BRANCH"
if [ -e "$dir/hit" ]; then
  date +%s.%N >> "$dir/starts"
  exit 0
fi
touch "$dir/hit"
reset=$(( $(date +%s) + $BENCH_RESET_IN ))
echo "$reset" > "$dir/reset"
echo "{\\"type\\": \\"usage_limit\\", \\"resets_at\\": $reset, \\"window\\": \\"five_hour\\"}"
exit 1
"""
Log = Callable[[str], None]


@dataclass
class UsageWaitFigures:
    """Per node: supervisor CPU time over the window (ms; CPU_WINDOW ms is 0.1 % of one
    core) and the relaunch delay after the due instant (ms)."""

    cpu_ms: list[float] = field(default_factory=list)
    relaunch_ms: list[float] = field(default_factory=list)


def _waiting(box: Sandbox, branch: str) -> bool:
    rows = box.sql("SELECT status FROM events WHERE node = ? AND event = 'usage_wait' "
                   "ORDER BY event_id DESC LIMIT 1", branch)
    return bool(rows) and rows[0][0] == "started"


def measure(box: Sandbox, samples: int, log: Log) -> UsageWaitFigures:
    """Run the ``samples`` waiting nodes in ``box`` (see the module docstring). Raises
    BenchError when a node does not wait or does not complete."""
    agent = box.base / "usage-agent"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    marks = box.base / "usage"
    names = [f"uw{n}" for n in range(1, samples + 1)]
    for name in names:
        (marks / f"{ROOT}.{name}").mkdir(parents=True)
        (box.base / "auth" / name).mkdir(parents=True)
        box.add_custom_node(name, {"01-WORK.md": "work\n"}, "--max-iters", "1", "--no-sync",
                            "--agent", str(agent))
    box.env.update({"BENCH_USAGE": str(marks), "BENCH_RESET_IN": str(int(RESET_IN))})
    for name in names:
        box.cli("node", "start", name,
                extra_env={"CLAUDE_CONFIG_DIR": str(box.base / "auth" / name)})
    figures = UsageWaitFigures()
    began: dict[str, tuple[psutil.Process, float, float]] = {}  # name -> (proc, t0, cpu0)
    deadline = time.monotonic() + RESET_IN + CPU_WINDOW
    while len(figures.cpu_ms) < samples:  # each node's own window, from its wait's start
        if time.monotonic() > deadline:
            raise BenchError(f"only {sorted(began)} of {names} began a usage-window wait")
        for name in names:
            if name in began:
                proc, t0, cpu0 = began[name]
                if t0 and time.monotonic() - t0 >= CPU_WINDOW:
                    if not _waiting(box, f"{ROOT}.{name}"):
                        raise BenchError(f"node {name} stopped waiting before its CPU "
                                         "window ended")
                    figures.cpu_ms.append((sum(proc.cpu_times()[:2]) - cpu0) * 1e3)
                    began[name] = (proc, 0.0, 0.0)  # measured
                continue
            status, pid = box.node_state(name)
            if pid is not None and _waiting(box, f"{ROOT}.{name}"):
                box.note_supervisor(pid)
                proc = psutil.Process(pid)
                began[name] = (proc, time.monotonic(), sum(proc.cpu_times()[:2]))
                log(f"usage wait: {name} waiting; reading its CPU for {CPU_WINDOW:.0f} s")
            elif status != "active":
                raise BenchError(f"node {name} is {status}, not waiting for its window")
        time.sleep(0.2)
    for name in names:
        status = box.wait_settled(name, timeout=RESET_IN + 60.0)
        if status != "completed":
            raise BenchError(f"node {name} ended {status} after its usage-window wait")
        folder = marks / f"{ROOT}.{name}"
        due = float(Path(folder / "reset").read_text()) + JITTER
        started = float(Path(folder / "starts").read_text().split()[0])
        figures.relaunch_ms.append((started - due) * 1e3)
    credentials = box.sql("SELECT COUNT(DISTINCT credential) FROM usage_windows")
    if credentials[0][0] != samples:
        raise BenchError(f"the {samples} nodes shared credentials: {credentials[0][0]} windows")
    return figures


def rows(figures: UsageWaitFigures, samples: int) -> list[Row]:
    """The table's section for ``figures``."""
    return [
        section(f"Usage-window wait: {samples} nodes, each on its own credential, waiting "
                f"for a reset {RESET_IN:.0f} s after their first launch"),
        Row(f"waiting supervisor: CPU time over {CPU_WINDOW:.0f} s",
            figures.cpu_ms, target=f"< {CPU_WINDOW:.0f} ms (0.1 %)",
            reference="10 ms (0.017 %)"),
        Row(f"resume: due instant (reset + {JITTER:.0f} s jitter) -> agent launched again",
            figures.relaunch_ms, target="< 2000 ms", reference="50-80 ms"),
    ]


def footer(figures: UsageWaitFigures) -> list[str]:
    """The footer line: the CPU figures as shares of one core."""
    shares = ", ".join(f"{ms / CPU_WINDOW / 10:.3f} %" for ms in figures.cpu_ms)
    return [f"usage wait: supervisor CPU as a share of one core over {CPU_WINDOW:.0f} s: "
            f"{shares} (target < 0.1 %)"]
