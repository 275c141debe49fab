"""Watch a running supervisor's memory from outside, through ``/proc/<pid>/status``.

``VmHWM`` is the kernel's own high-water mark of the process's resident set, so
sampling it cannot miss a short spike: the last value read before the process exits is
its peak up to that read. Only the final stretch after that read (at most one sampling
interval, during which the run is being closed) is not covered.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from bench.sandbox import ROOT, SETTLED, BenchError, Sandbox

SAMPLE_SECONDS = 0.05  # /proc reads of the supervisor
STATUS_SECONDS = 0.25  # database reads (node status, iterations done)


@dataclass(frozen=True)
class MemoryReport:
    """KiB figures of one supervisor. ``hwm_kib``: the last VmHWM read; ``rss_kib``: every
    VmRSS read; ``early_hwm_kib``: VmHWM once ``early_at`` iterations were done (growth
    check); ``tail_ms``: the time between the last read and the first read that found the
    process gone (the stretch not covered); ``iterations``: iterations recorded."""

    hwm_kib: int
    rss_kib: list[int]
    early_hwm_kib: int | None
    early_at: int
    tail_ms: float
    iterations: int


def _status_kib(pid: int) -> tuple[int, int] | None:
    """(VmHWM, VmRSS) in KiB, None when the process is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0])
    except (KeyError, ValueError, IndexError):
        return None


def watch_memory(box: Sandbox, name: str, *, early_at: int, timeout: float) -> MemoryReport:
    """Sample node ``name``'s supervisor until it settles and its process is gone.

    Raises BenchError on timeout or when the supervisor was never seen.
    """
    deadline = time.monotonic() + timeout
    pid: int | None = None
    hwm = done = 0
    rss: list[int] = []
    early: int | None = None
    last_read = next_status = 0.0
    settled = False
    while time.monotonic() < deadline:
        now = time.monotonic()
        reading = _status_kib(pid) if pid is not None else None
        if reading is not None:
            hwm, last_read = reading[0], now
            rss.append(reading[1])
        elif pid is not None and settled:
            return MemoryReport(hwm, rss, early, early_at, (now - last_read) * 1e3, done)
        if now >= next_status and not settled:
            next_status = now + STATUS_SECONDS
            status, recorded = box.node_state(name)
            if pid is None and recorded is not None:
                pid = recorded
                box.note_supervisor(pid)
            done = _iterations_done(box, name)
            if early is None and done >= early_at and hwm:
                early = hwm
            settled = status in SETTLED
            if settled and not rss:
                raise BenchError(f"never read the memory of {name}'s supervisor")
        time.sleep(SAMPLE_SECONDS)
    raise BenchError(f"the supervisor of node {name} did not finish within {timeout:.0f}s")


def _iterations_done(box: Sandbox, name: str) -> int:
    rows = box.sql("SELECT count(*) FROM iterations WHERE node = ? AND ended_at IS NOT NULL",
                   f"{ROOT}.{name}")
    value = rows[0][0] if rows else 0
    return value if isinstance(value, int) else 0
