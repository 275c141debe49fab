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


_CACHE_PROBE = """
import sys, warnings
from fractal.runtime import heap

calls = []
def deprecated():  # what Python 3.14 does when the old name is called
    warnings.warn("sys._clear_type_cache() is deprecated", DeprecationWarning, stacklevel=2)
if sys.argv[1] == "renamed":  # 3.13+: the general name exists, the old one warns
    sys._clear_internal_caches = lambda: calls.append("internal")
    sys._clear_type_cache = deprecated
else:  # a later Python without either name
    for name in ("_clear_internal_caches", "_clear_type_cache"):
        if hasattr(sys, name):
            delattr(sys, name)
heap.freeze_boot_heap()
for _ in range(3):
    heap.between_iterations()
print(len(calls))
"""


def test_the_step_uses_the_caches_current_name_and_survives_its_removal() -> None:
    """``sys._clear_type_cache`` is deprecated since Python 3.13 (3.14 warns on every call)
    in favour of ``sys._clear_internal_caches``; a supervisor's iteration must neither
    warn nor, once the old name is gone, crash."""
    for mode, cleared in (("renamed", "3"), ("gone", "0")):
        proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                               _CACHE_PROBE, mode], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == cleared, mode
