"""Run one scenario end to end: build its tree, inject, heal, check, clean up.

The result is recorded on the test (``record_property("soak", ...)``) so the soak
conftest can total scenarios, faults and violations across xdist workers.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable

from tests.soak.harness import SoakTree
from tests.soak.invariants import Violation, check_tree, tree_processes
from tests.soak.scenarios import SCENARIOS

Recorder = Callable[[str, object], None]


def run_scenario(name: str, seed: str, record: Recorder) -> tuple[list[Violation], list[str]]:
    """Run scenario ``name`` with ``random.Random(seed)``; return every violation (the
    shared invariants after healing, then the scenario's own expectations) and the notes
    (where the fault landed; on a violation, the rows and logs)."""
    rng = random.Random(seed)
    box = SoakTree.create(seed)
    faults = 0
    notes: list[str] = []
    violations: list[Violation] = []
    try:
        try:
            outcome = SCENARIOS[name](box, rng)
        except BaseException:
            print(forensics(box))  # shown by pytest with the failure
            raise
        finally:
            box.heal()  # heal whatever the scenario left, even when it broke off
        faults, notes = outcome.faults, outcome.notes
        _quiesce(box)
        violations = check_tree(box.repo, journal=box.journal, untouched=outcome.untouched)
        violations += outcome.problems
        if violations:
            notes.append(forensics(box))
    finally:
        record("soak", json.dumps({"scenario": name, "seed": seed, "faults": faults,
                                   "notes": notes, "violations": [str(v) for v in violations]}))
        box.close()
    return violations, notes


QUIESCE_SECONDS = 20.0  # a settled supervisor still closes its log and engine, then exits


def _closing(box: SoakTree) -> bool:
    """A supervisor (or its pane's tmux server) is still on its way out."""
    return any("node _run" in p.cmdline or p.cmdline.split(" ", 1)[0].endswith("tmux")
               for p in tree_processes(box.repo))


def _quiesce(box: SoakTree) -> None:
    """Give supervisors and their tmux server up to QUIESCE_SECONDS to exit: a node reads
    settled slightly before its supervisor process is gone. Nothing else is waited for:
    an agent or a setup.sh alive at this point is a leak."""
    deadline = time.monotonic() + QUIESCE_SECONDS
    while _closing(box) and time.monotonic() < deadline:
        time.sleep(0.05)


def forensics(box: SoakTree) -> str:
    """What a failed scenario leaves to read: every row's status and reason, and the tail
    of each node's supervisor.log."""
    lines = []
    for table, key in (("runs", "run_id"), ("iterations", "iter_id"), ("steps", "step_id")):
        for row in box.sql(f"SELECT {key}, node, status, exit_code, metadata, started_at, "
                           f"ended_at FROM {table} ORDER BY {key}"):
            lines.append(f"{table[:-1]} {row}")
    for (node,) in box.sql("SELECT node FROM nodes WHERE node != 'main'"):
        log = box.repo / ".worktrees" / str(node) / ".fractal" / str(node) / "supervisor.log"
        with contextlib.suppress(OSError):
            lines.append(f"-- {log.name} of {node}:")
            lines += log.read_text(errors="replace").splitlines()[-15:]
    return "\n".join(lines)


def describe(name: str, seed: str, violations: list[Violation],
             notes: list[str] | None = None) -> str:
    """The failure message: the scenario, how to replay it, each violation, and notes."""
    lines = [f"scenario {name} (seed {seed!r}): {len(violations)} invariant violation(s)"]
    lines += [f"  {v}" for v in violations]
    return "\n".join(lines + list(notes or []))
