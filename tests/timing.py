"""Where a test's time goes: an opt-in per-test record of wall and CPU seconds.

With ``FRACTAL_TEST_TIMING=<file>`` set, every test appends one JSON line to the file
(each xdist worker to ``<file>.<worker>``): its node id, wall seconds (setup, call and
teardown), this process's CPU seconds, the CPU seconds of the child processes it waited
for (git, stub agents run in-process; not a tmux-hosted supervisor, whose parent is the
tmux server) plus its CLI calls' (``tests/cliserver.py``), and how many ``fractal`` CLI
processes it started. Sum the
file per test module or per tier to see where the suite spends its time::

    FRACTAL_TEST_TIMING=/tmp/t.jsonl pytest -n 2 tests/e2e
    python -m tests.timing /tmp/t.jsonl*

Without the variable nothing is measured. ``FRACTAL_TEST_CLI_LOG=<file>`` logs every CLI
call the fork server runs (``tests/cliserver.py``); ``python -m tests.timing --cli <file>``
sums those per command (calls, CPU seconds). The same files regenerate the table of walls
that orders the suite longest first (``tests/ordering.py``); record it from a whole-suite
run (``make test``), since a test missing from the table falls back to an estimate::

    python -m tests.timing --write-durations tests/durations.json /tmp/t.jsonl*

A test moved to another module or renamed keeps its wall when the table's ids are
rewritten (``OLD=NEW`` prefixes of node ids; the first that matches wins)::

    python -m tests.timing --rename-in tests/durations.json \\
        tests/e2e/test_a.py=tests/e2e/test_b.py \\
        tests/unit/test_c.py::test_x=tests/unit/test_d.py::test_x
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cliserver import CLI_CPU
from tests.guards import CLI_SPAWNS

TIMING_ENV = "FRACTAL_TEST_TIMING"
_TARGET = os.environ.get(TIMING_ENV)  # read at import: the session strips FRACTAL_* later


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime + CLI_CPU[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    target = _TARGET
    if not target:
        yield
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = Path(f"{target}.{worker}" if worker else target)
    wall, (mine, kids), clis = time.monotonic(), _cpu(), CLI_SPAWNS[0]
    yield
    after_mine, after_kids = _cpu()
    record = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
              "cpu": round(after_mine - mine, 3), "child_cpu": round(after_kids - kids, 3),
              "cli": CLI_SPAWNS[0] - clis}
    with path.open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def _tier(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 else "top"


def summary(files: list[Path]) -> str:
    """Per tier and the 25 heaviest modules: tests, wall, CPU (own + children), CLI calls."""
    tiers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    modules: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for file in files:
        for line in file.read_text().splitlines():
            rec = json.loads(line)
            module = rec["test"].split("::")[0]
            for key, table in ((_tier(module), tiers), (module, modules)):
                row = table[key]
                row[0] += 1
                row[1] += rec["wall"]
                row[2] += rec["cpu"] + rec["child_cpu"]
                row[3] += rec["cli"]
    lines = [f"{'':48} {'tests':>6} {'wall s':>8} {'cpu s':>8} {'cli':>6}"]
    for title, table, limit in (("tier", tiers, None), ("module", modules, 25)):
        lines.append(f"-- by {title}")
        ranked = sorted(table.items(), key=lambda kv: -kv[1][2])[:limit]
        lines += [f"{k[-48:]:48} {int(v[0]):6} {v[1]:8.1f} {v[2]:8.1f} {int(v[3]):6}"
                  for k, v in ranked]
    return "\n".join(lines)


_GROUPS = frozenset({"node", "tree", "radio", "wiki", "plan", "usage"})
"""CLI command groups: a call is counted by its group and subcommand (``node init``)."""


def cli_summary(files: list[Path]) -> str:
    """Per command of ``FRACTAL_TEST_CLI_LOG`` files (``tests/cliserver.py``): calls, CPU
    seconds in all and per call, the costliest first."""
    table: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for file in files:
        for line in file.read_text().splitlines():
            rec = json.loads(line)
            argv = [str(a) for a in rec["argv"]]
            words = argv[:2] if argv and argv[0] in _GROUPS else argv[:1]
            row = table[" ".join(words)]
            row[0] += 1
            row[1] += float(rec["cpu"])
    lines = [f"{'command':32} {'calls':>6} {'cpu s':>8} {'per call':>9}"]
    lines += [f"{k[:32]:32} {int(v[0]):6} {v[1]:8.2f} {v[1] / v[0]:9.3f}"
              for k, v in sorted(table.items(), key=lambda kv: -kv[1][1])]
    return "\n".join(lines)


def durations(files: list[Path]) -> dict[str, float]:
    """node id -> wall seconds (0.1 s steps) from timing files; a test recorded more than
    once (a rerun) keeps its longest wall."""
    walls: dict[str, float] = {}
    for file in files:
        for line in file.read_text().splitlines():
            rec = json.loads(line)
            walls[rec["test"]] = max(walls.get(rec["test"], 0.0), float(rec["wall"]))
    return {test: round(wall, 1) for test, wall in sorted(walls.items())}


def write_durations(target: Path, files: list[Path]) -> int:
    """Write ``{"tests": durations(files)}`` to ``target`` (sorted, one test a line, so a
    regeneration diffs readably); returns the number of tests written."""
    table = durations(files)
    _write_table(target, table)
    return len(table)


def _write_table(target: Path, table: dict[str, float]) -> None:
    body = ",\n".join(f"    {json.dumps(test)}: {wall}" for test, wall in sorted(table.items()))
    target.write_text('{"tests": {\n' + body + "\n}}\n")


def rename_durations(target: Path, moves: list[tuple[str, str]]) -> int:
    """Rewrite the node ids of moved tests in the durations table ``target`` in place, so a
    move keeps its walls without a whole-suite timing run.

    Each move is ``(old, new)``: an id starting with ``old`` (a module path, or a module
    path and a test name) starts with ``new`` instead; the first move that matches wins.
    An id the rename lands on twice keeps the longer wall. Returns how many ids moved."""
    table: dict[str, float] = json.loads(target.read_text())["tests"]
    moved: dict[str, float] = {}
    count = 0
    for test, wall in table.items():
        for old, new in moves:
            if test.startswith(old):
                test, count = new + test[len(old):], count + 1
                break
        moved[test] = max(wall, moved.get(test, 0.0))
    _write_table(target, moved)
    return count


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.timing", description=(
        "Sum FRACTAL_TEST_TIMING files per tier and module, or write the durations table."))
    parser.add_argument("files", nargs="+", help=(
        "timing files (one per worker); with --rename-in, OLD=NEW node id prefixes"))
    parser.add_argument("--write-durations", type=Path, metavar="JSON",
                        help="write the per-test walls to JSON (tests/durations.json)")
    parser.add_argument("--rename-in", type=Path, metavar="JSON",
                        help="rewrite the ids of moved tests in JSON (tests/durations.json)")
    parser.add_argument("--cli", action="store_true",
                        help="the files are FRACTAL_TEST_CLI_LOG files: sum them per command")
    args = parser.parse_args(argv)
    if args.rename_in is not None:
        pairs = [arg.partition("=") for arg in args.files]
        if any(not old or not sep or not new for old, sep, new in pairs):
            parser.error("--rename-in takes OLD=NEW pairs of node id prefixes")
        count = rename_durations(args.rename_in, [(old, new) for old, _, new in pairs])
        print(f"{count} test ids rewritten in {args.rename_in}", file=sys.stderr)
        return 0
    files = [Path(file) for file in args.files]
    if args.cli:
        print(cli_summary(files))
        return 0
    if args.write_durations is not None:
        count = write_durations(args.write_durations, files)
        print(f"{count} tests written to {args.write_durations}", file=sys.stderr)
        return 0
    print(summary(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
