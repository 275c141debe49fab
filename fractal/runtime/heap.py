"""The supervisor's Python heap over a long run: what keeps it from growing per iteration.

A supervisor runs thousands of iterations in one interpreter, and two CPython caches
grew with them although no object of the loop outlived its iteration:

- **Free lists.** A freed tuple (also a float, list or dict) is parked on a free list of
  its size for reuse, up to 2,000 per size. A tuple built from a generator
  (``tuple(x for ...)``, ``dataclasses.fields``, ``subprocess`` resolving a bare program
  name along ``PATH``) is allocated at one size and shrunk to its final one, so each such
  call added one tuple to that size's list. Only a full garbage collection empties the
  lists, and a supervisor's loop allocates too few containers to ever trigger one.
- **The type attribute cache.** It keeps a reference to the name of every attribute it
  looked up. C code asking for an attribute by a C string (``TextIOWrapper`` opening a
  file asks its codec for ``incrementaldecoder``) makes a fresh name each time, and the
  cache files it by the name's address, so the fresh names filled new slots (4,096 of
  them) and stayed.

Both were cut by the same step between iterations: ``freeze_boot_heap`` moves what the
supervisor built while booting (modules, classes, its own objects: about 24,000) into
the collector's permanent generation once, so ``between_iterations`` can run a full
collection over only what the loop allocated since (about 0.1 ms, not the 25-40 ms of a
collection over the whole heap) and clear the attribute cache (refilled by the next
lookups). Measured on a no-op agent, the resident set grew 140-180 KiB from iteration 20
to 200 before, and 0-12 KiB after (docs/benchmarks.md).

The loop calls ``iteration_top`` at each iteration's top and ``at_launch`` once an agent
runs, so the collection and the cache's refill happen while the first agent of the
iteration works, not between the last step's end and the next one's start; an iteration
that launches nothing still gets its step at the next top.

Only the pane's supervisor freezes its heap; an in-process run (a test) does not, and
``between_iterations`` then does nothing, so a test process is never collected per
iteration.
"""

from __future__ import annotations

import gc
import sys

__all__ = ["at_launch", "between_iterations", "freeze_boot_heap", "iteration_top"]

_frozen = False  # set once per process by freeze_boot_heap
_due = False  # an iteration began whose step is still owed (iteration_top)


def freeze_boot_heap() -> None:
    """Freeze every object the boot left tracked into the permanent generation (never
    collected again; objects built at boot live for the run anyway) and turn the collector
    on. Turns ``between_iterations`` on for this process.

    The pane's entry point (``fractal/__main__.py``) boots with the collector off, and no
    collection runs first: with every boot object still young it would walk the whole
    heap (about 24,000 objects) to free the few hundred cyclic leftovers of the imports
    (about 0.1 MiB, kept frozen for the run), a tenth of a short run's CPU."""
    global _frozen
    gc.freeze()
    gc.enable()
    _frozen = True


def between_iterations() -> None:
    """In a process whose boot heap is frozen: a full collection of the objects made
    since (which also empties the interpreter's free lists) and a cleared type attribute
    cache. Elsewhere nothing."""
    if _frozen:
        gc.collect()
        # Python 3.13 named the general call ``_clear_internal_caches`` (the type cache
        # among them) and 3.14 warns on the old name; a Python without either skips it.
        clear = getattr(sys, "_clear_internal_caches", None) \
            or getattr(sys, "_clear_type_cache", None)
        if clear is not None:
            clear()


def iteration_top() -> None:
    """An iteration begins: the step is owed, taken by the next ``at_launch`` (while an
    agent runs, off the moment between one step's end and the next one's start). When the
    previous iteration launched nothing it is still owed, and is taken here."""
    global _due
    if _due:
        between_iterations()
    _due = _frozen


def at_launch() -> None:
    """An agent was started: take the step ``iteration_top`` left owed, if any."""
    global _due
    if _due:
        _due = False
        between_iterations()
