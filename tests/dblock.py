"""Another process holding a tree database's lock: a real ``sqlite3`` connection in a child
process, for the tests of waiting on a busy database (``fractal/store/lockwait.py``)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "exclusive":
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE" if sys.argv[2] == "exclusive" else "BEGIN IMMEDIATE")
conn.execute("INSERT INTO events (node, event, actor, status, created_at) "
             "VALUES ('main', 'holder', 'test', 'completed', '2026-01-01T00:00:00Z')")
print("held", flush=True)
if float(sys.argv[3]) > 0:
    time.sleep(float(sys.argv[3]))  # the scenario: a lock held this long, then let go
else:
    sys.stdin.readline()  # held until the test lets go
conn.execute("COMMIT")
"""


@contextmanager
def held(path: Path, seconds: float = 0.0, *, mode: str = "write") -> Iterator[float]:
    """Another process holds the database's write lock (``mode`` "exclusive": readers
    are locked out too) for ``seconds`` (0: until the block ends); yields the monotonic
    time the lock was taken."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode, str(seconds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield time.monotonic()
    finally:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a timed hold has let go already
            proc.stdin.write("\n")
            proc.stdin.close()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
