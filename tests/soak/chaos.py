"""``make soak-tree``: a 30-node tree under a chaos driver for a while, its invariants
checked as it goes and at the end (docs/reliability.md).

The tree (tests/soak/chaostree.py): three levels of leads, mids and leaves on the soak
agent, leaves making real commits (some gated, some conflicting with a sibling, some
sending radio messages), leads and mids merging their children and handing conflicts
back, and one pool of ten items whose workers fractal's dispatcher runs. The driver
(tests/soak/chaosdriver.py) injects a fault every TICK seconds on average and tends the
tree; the checks are in tests/soak/chaoschecks.py.

``python -m tests.soak.chaos --minutes 20 [--seed N]`` (``make soak-tree
SOAK_TREE_MINUTES=20``); the seed is printed first and replays the schedule and every
choice the driver makes on the same states.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.soak.chaoschecks import QUIET_CPU_PCT
from tests.soak.chaosdriver import KINDS, MIN_EACH, TICK, Chaos, schedule
from tests.soak.chaostree import build
from tests.soak.harness import SoakTree
from tests.soak.run import forensics
from tests.soak.treefaults import git

__all__ = ["KINDS", "MIN_EACH", "TICK", "main", "schedule"]


def start_all(box: SoakTree, names: list[str]) -> None:
    """Start every planned node, deepest first, ten verbs at a time."""
    names = sorted(names, key=lambda n: -n.count("."))
    for at in range(0, len(names), 10):
        procs = [subprocess.Popen([sys.executable, "-m", "fractal", "node", "start",
                                   f"main.{name}"], cwd=box.repo, env=box.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for name in names[at:at + 10]]
        for proc in procs:
            proc.wait(timeout=300)


def drive(chaos: Chaos, minutes: float) -> None:
    """The chaos phase: a fault per tick, upkeep and the continuous checks."""
    began = time.monotonic()
    end, last_report, tick = began + minutes * 60, began, 0
    next_at = began
    while time.monotonic() < end:
        next_at += TICK * chaos.rng.uniform(0.5, 1.5)
        time.sleep(max(0.0, next_at - time.monotonic()))
        steps = (chaos.land, functools.partial(chaos.inject, tick), chaos.tend,
                 chaos.watch.look)
        for step in steps:
            try:
                step()
            except Exception as exc:  # a read that timed out: note it, drive on
                chaos.upkeep[f"driver error ({type(exc).__name__})"] += 1
                print(f"  driver: {exc!s:.300}", flush=True)
        tick += 1
        if time.monotonic() - last_report >= 60:
            last_report = time.monotonic()
            print(f"  {round((last_report - began) / 60)} min: {tick} ticks, "
                  f"{sum(chaos.sent.values())} faults, {len(chaos.flights)} verbs in "
                  f"flight, {len(chaos.watch.violations)} violations, statuses "
                  f"{dict(Counter(chaos.statuses().values()))}", flush=True)


def report(chaos: Chaos, seed: str, minutes: float, cpu: float | None,
           made: dict[str, int], times: dict[str, float]) -> None:
    watch = chaos.watch
    judged, growth, fleet = watch.memory_growth()
    nodes = chaos.statuses()
    print(f"soak-tree: {minutes:g} min of chaos, seed {seed}; built in {times['build']:.0f} s, "
          f"wound down in {times['end']:.0f} s")
    print(f"  tree: {len(nodes)} nodes ({', '.join(f'{k} {v}' for k, v in made.items())}; "
          f"{sum(1 for n in nodes if chaos.shape.is_worker(n))} pool workers created)")
    print("  faults sent: " + ", ".join(f"{k} {chaos.sent[k]}" for k in KINDS)
          + f" (total {sum(chaos.sent.values())})")
    print("  faults taken: " + ", ".join(f"{k} {chaos.accepted[k]}" for k in KINDS))
    print("  kinds with nothing to act on at their tick (tried later): "
          + (", ".join(f"{k} {v}" for k, v in sorted(chaos.deferred.items())) or "none"))
    print("  upkeep: " + ", ".join(f"{k} {v}" for k, v in sorted(chaos.upkeep.items())))
    box = chaos.box
    merges = Counter(str(s) for (s,) in box.sql("SELECT status FROM merges"))
    (handed,), = box.sql("SELECT COUNT(*) FROM merges WHERE metadata LIKE '%handed back to%'")
    (approved,), = box.sql("SELECT COUNT(*) FROM steps WHERE approved != ''")
    items = Counter(str(s) for (s,) in box.sql("SELECT status FROM pool_items"))
    commits = git(box.repo, "rev-list", "--count", "--branches", check=False)
    print(f"  work: {commits} commits on the branches; merges {dict(merges)}, {handed} of them "
          f"conflicts handed back; {approved} gates approved; pool items {dict(items)}")
    print("  invariants checked: " + ", ".join(f"{k} {v}" for k, v in
                                               sorted(watch.checks.items())))
    print(f"  supervisors: {len(watch.memory)} seen; {judged} judged for memory, largest RSS "
          f"growth {growth:.1f} MiB, the median's "
          + ("n/a" if fleet is None else f"{fleet:+.1f} MiB") + "; summed CPU while agents sleep "
          + ("n/a" if cpu is None else f"{cpu:.1f} % of one core (limit {QUIET_CPU_PCT:g} %)"))
    print(f"  violations: {len(watch.violations)}")
    for violation in watch.violations[:40]:
        print(f"    {violation}")


def keep(box: SoakTree, seed: str) -> None:
    """Save what a violation leaves to read before the tree is removed: a copy of the
    database, every row's status and reason with each node's log tail, the soak agents'
    journal and hand-back record, and a bundle of every ref of the repository (``git clone repo.bundle``)."""
    out = Path(tempfile.gettempdir()) / f"soak-tree-{seed}"
    out.mkdir(exist_ok=True)
    shutil.copyfile(box.db, out / "fractal.db")
    for name in ("journal.jsonl", "handbacks.jsonl"):
        if (box.base / name).exists():
            shutil.copyfile(box.base / name, out / name)
    subprocess.run(["git", "bundle", "create", str(out / "repo.bundle"), "--all"],
                   cwd=box.repo, capture_output=True, check=False)
    (out / "forensics.txt").write_text(forensics(box), encoding="utf-8")
    print(f"  kept for reading: {out}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float,
                        default=float(os.environ.get("SOAK_TREE_MINUTES", "20")))
    parser.add_argument("--seed", default=os.environ.get("FRACTAL_SOAK_SEED")
                        or str(random.SystemRandom().randrange(10**9)))
    args = parser.parse_args(argv)
    print(f"soak-tree seed: {args.seed} (replay: FRACTAL_SOAK_SEED={args.seed} make "
          f"soak-tree SOAK_TREE_MINUTES={args.minutes:g})", flush=True)
    box = SoakTree.create(args.seed, {"SOAK_RADIO": "", "SOAK_HANDBACKS": "",
                                      "FRACTAL_NOTIFY_IDLE_S": "5"})
    box.env["SOAK_RADIO"] = str(box.base / "radio.jsonl")
    box.env["SOAK_HANDBACKS"] = str(box.base / "handbacks.jsonl")
    chaos = Chaos(box, random.Random(args.seed),
                  schedule(args.seed, int(args.minutes * 60 / TICK)))
    times: dict[str, float] = {}
    cpu: float | None = None
    started = time.monotonic()
    try:
        made = build(box, chaos.rng, chaos.shape)
        start_all(box, chaos.shape.planned())
        times["build"] = time.monotonic() - started
        print(f"  tree built and started in {times['build']:.0f} s", flush=True)
        drive(chaos, args.minutes)
        ending = time.monotonic()
        chaos.drain()
        cpu = chaos.quiet_cpu()
        chaos.wind_down()
        chaos.watch.quiet_cpu(cpu)
        chaos.watch.final()
        times["end"] = time.monotonic() - ending
        report(chaos, args.seed, args.minutes, cpu, made, times)
        if chaos.watch.violations:
            keep(box, args.seed)
    finally:
        chaos.threads.shutdown(wait=False, cancel_futures=True)
        box.close()
    return 1 if chaos.watch.violations else 0


if __name__ == "__main__":
    sys.exit(main())
