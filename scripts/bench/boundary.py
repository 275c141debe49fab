"""The iteration boundary alone, split into its pieces: ``python scripts/bench/boundary.py [N]``.

Runs one sandbox node for N iterations (default 41) of one no-op step with
``FRACTAL_TRACE`` set, then prints the boundary (last agent exit -> next first spawn,
the first one left out: it warms the caches) as median, lower quartile, lower decile,
minimum and max (on a shared machine the low ones show the cost without the waits for a
core), and,
with ``-v``, the median of every interval between consecutive trace lines inside the
boundaries. Any extra ``fractal.runtime.clock.trace(NAME, 0)`` call added to the loop
while investigating shows up there as its own piece. ``PYTHONPATH=<other checkout>``
times another version of the package with the same driver (alternate them: the machine
is shared).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sandbox import BenchError, Sandbox


def boundaries(lines: list[tuple[str, int]]) -> tuple[list[float], dict[str, list[float]]]:
    """(boundary ms, piece name -> ms) from trace ``lines`` in file order."""
    gaps: list[float] = []
    pieces: dict[str, list[float]] = {}
    for k, (point, ns) in enumerate(lines):
        if point != "exit":
            continue
        nxt = next((j for j in range(k + 1, len(lines)) if lines[j][0] == "spawn"), None)
        if nxt is None:
            continue
        gaps.append((lines[nxt][1] - ns) / 1e6)
        for a, b in zip(lines[k:nxt], lines[k + 1:nxt + 1], strict=True):
            pieces.setdefault(f"{a[0]} -> {b[0]}", []).append((b[1] - a[1]) / 1e6)
    return gaps[1:], {name: values[1:] for name, values in pieces.items()}


def main(argv: list[str]) -> int:
    numbers = [a for a in argv if a.isdigit()]
    iterations = int(numbers[0]) if numbers else 41
    box = Sandbox.create()
    try:
        box.add_node("edge", steps=1, max_iters=iterations)
        trace = box.base / "trace-edge.log"
        box.start("edge", trace)
        if box.wait_settled("edge", 300) != "completed":
            raise BenchError("the boundary run did not complete")
        lines = [(p[0], int(p[1])) for p in
                 (line.split() for line in trace.read_text(encoding="ascii").splitlines())]
    finally:
        box.close()
    gaps, pieces = boundaries(lines)
    if not gaps:
        raise BenchError("no iteration boundary in the trace")
    deciles = statistics.quantiles(gaps, n=10) if len(gaps) > 1 else [gaps[0]] * 9
    print(f"boundary n={len(gaps)} median={statistics.median(gaps):.2f} ms "
          f"p25={statistics.quantiles(gaps, n=4)[0] if len(gaps) > 1 else gaps[0]:.2f} "
          f"p10={deciles[0]:.2f} min={min(gaps):.2f} max={max(gaps):.2f} "
          f"load={os.getloadavg()[0]:.2f}")
    if "-v" in argv:
        for name, values in pieces.items():
            if values:
                print(f"  {name:44s} {statistics.median(values):7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
