"""The supervisor's heap step between iterations (fractal/runtime/heap.py), in a fresh
interpreter: freezing a test process's heap would change every later test."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import os, re, sys
from fractal.runtime import heap

def parked():
    r, w = os.pipe()
    saved = os.dup(2)
    os.dup2(w, 2)
    os.close(w)
    sys._debugmallocstats()
    os.dup2(saved, 2)
    os.close(saved)
    text = os.read(r, 1 << 20).decode()
    os.close(r)
    return int(re.search(r"(\\d+) free 16-sized PyTupleObjects", text).group(1))

if sys.argv[1] == "frozen":
    heap.freeze_boot_heap()
before = parked()
for _ in range(300):  # an iteration's tuple built from a generator, then dropped
    tuple(n for n in range(16))
    heap.between_iterations()
print(parked() - before)
"""


def _parked_growth(mode: str) -> int:
    proc = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True,
                          text=True, check=True, timeout=60)
    return int(proc.stdout.strip())


def test_with_the_boot_heap_frozen_the_free_lists_do_not_grow_per_iteration() -> None:
    assert _parked_growth("frozen") <= 1


def test_without_a_frozen_heap_the_step_leaves_the_process_alone() -> None:
    assert _parked_growth("in-process") >= 299  # each dropped tuple stayed parked
