"""Drive the steering verbs against live nodes and time what they make happen.

The clock starts when the verb's process has exited (``fractal node pause ...`` returned)
and stops at the first observable sign that the supervisor acted on it. Most signs are
timestamps the supervisor itself writes (a step row's ``ended_at``, a run's ``ended_at``,
the ``pause``/``parked`` event, the next step row's ``started_at``: UTC, millisecond
resolution, truncated); the one that is not — an agent's process group being gone — is
polled every millisecond. A negative figure means the supervisor had already reacted
when the verb's process finished exiting.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from bench.sandbox import ROOT, SETTLED, BenchError, Sandbox, _fractal_argv

T = TypeVar("T")
POLL = 0.002  # seconds between database polls


def epoch(stamp: object) -> float:
    """A database timestamp (``2026-01-01T00:00:00.123Z``) as Unix seconds."""
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def until(probe: Callable[[], T | None], timeout: float, what: str,
          interval: float = POLL) -> T:
    """Poll ``probe`` until it returns something other than None/False; return it.
    Raises BenchError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Driver:
    """Verbs and probes on the nodes of one sandbox (names without the root prefix)."""

    def __init__(self, box: Sandbox) -> None:
        self.box = box

    def verb(self, *args: str) -> float:
        """Run ``fractal ARGS``; return the wall-clock time (epoch s) right after it exited.
        Raises BenchError when it fails."""
        proc = subprocess.run([*_fractal_argv(), *args], cwd=self.box.repo, env=self.box.env,
                              capture_output=True, text=True, check=False)
        done = time.time()
        if proc.returncode != 0:
            raise BenchError(f"fractal {' '.join(args)} exited {proc.returncode}: "
                             f"{proc.stderr.strip()}")
        return done

    def one(self, query: str, *params: object) -> tuple[object, ...] | None:
        rows = self.box.sql(query, *params)
        return rows[0] if rows else None

    def status(self, name: str) -> str:
        return self.box.node_state(name)[0]

    def running(self, name: str, step_name: str | None = None) -> tuple[int, int]:
        """Wait until ``name`` has an open step with a process group; (step_id, pgid)."""
        query = ("SELECT step_id, pgid FROM steps WHERE node = ? AND ended_at IS NULL "
                 "AND pgid IS NOT NULL")
        params: list[object] = [f"{ROOT}.{name}"]
        if step_name:
            query += " AND step_name = ?"
            params.append(step_name)
        row = until(lambda: self.one(query + " ORDER BY step_id DESC", *params), 60,
                    f"a running step of {name}")
        return int(str(row[0])), int(str(row[1]))

    def supervisor_gone(self, name: str) -> None:
        """Wait until ``name``'s supervisor and its tmux session have exited."""
        until(lambda: self.box.node_state(name)[1] is None, 60, f"{name}'s supervisor to exit")
        until(lambda: not self.session_alive(name), 60, f"{name}'s pane to exit")

    def session_alive(self, name: str) -> bool:
        proc = subprocess.run(["tmux", "-S", str(self.box.socket), "has-session", "-t",
                               f"={ROOT}.{name}"], capture_output=True, check=False)
        return proc.returncode == 0

    def settled(self, name: str, also: frozenset[str] = frozenset()) -> str:
        """Wait until ``name`` is settled (or in ``also``); return its status."""
        def reached() -> str | None:
            status = self.status(name)
            return status if status in SETTLED | also else None
        return until(reached, 120, f"{name} to settle")

    def parked_after(self, name: str, since_id: int) -> float:
        """Epoch of the loop's ``pause`` (parked) event of ``name`` newer than ``since_id``."""
        row = until(lambda: self.one("SELECT created_at FROM events WHERE node = ? AND "
                                     "event = 'pause' AND actor = 'loop' AND event_id > ?",
                                     f"{ROOT}.{name}", since_id), 30, f"{name} to park")
        return epoch(row[0])

    def last_event_id(self) -> int:
        row = self.one("SELECT COALESCE(MAX(event_id), 0) FROM events")
        return int(str(row[0])) if row else 0

    def run_closed(self, name: str) -> tuple[float, str]:
        """Wait until ``name``'s newest run is closed; (ended_at epoch, status)."""
        row = until(lambda: self.one("SELECT ended_at, status FROM runs WHERE node = ? AND "
                                     "ended_at IS NOT NULL AND run_id = (SELECT MAX(run_id) "
                                     "FROM runs WHERE node = ?)", f"{ROOT}.{name}",
                                     f"{ROOT}.{name}"), 60, f"{name}'s run to close")
        return epoch(row[0]), str(row[1])

    def closed_iterations(self, name: str) -> int:
        row = self.one("SELECT COUNT(*) FROM iterations WHERE node = ? AND ended_at IS NOT "
                       "NULL", f"{ROOT}.{name}")
        return int(str(row[0])) if row else 0

    def group_gone_at(self, pgid: int, timeout: float = 30.0) -> float:
        """Poll (1 ms) until no process is left in group ``pgid``; epoch of the first miss."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return time.time()
            except PermissionError:
                pass
            time.sleep(0.001)
        raise BenchError(f"process group {pgid} still alive after {timeout:.0f}s")
