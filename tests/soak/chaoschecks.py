"""The invariants ``make soak-tree`` checks (tests/soak/chaos.py), as it runs and at the end.

As it runs (``Watch.look``, every tick): ``integrity`` (``PRAGMA integrity_check`` and
``foreign_key_check``); ``one-supervisor`` (never two live supervisors for one node);
``orphan`` (no live process left in the process group of a step row that closed, seen on
two looks at least ORPHAN_GRACE_S apart); every branch tip is noted for ``reachable``;
every supervisor's RSS is sampled for ``memory-flat``.

At the end: ``resumable`` (``resumed``: every node parked once all was stopped leaves
``paused`` after ``fractal resume``); then (``final``, on the tree stopped and healed
again): the soak invariants of
tests/soak/invariants.py (rows closed with a valid status or parked and resumable, node
statuses, integrity, ``no-process``, ``bytes-kept``; a node whose supervisor died while
it booted, before it opened a run, is healed ``exited`` with a notice that says so, which
those checks do not know: such a node is counted, not reported); ``reachable``: every commit any
branch ever pointed at (the tips noted, and every entry of the branches' reflogs) is
reachable from a branch or a rescue ref; ``merged-present``: every merged child's files
are in its target; ``hand-back-keeps``: no merge handed back to a child left out a file
of the target's tip (no soak agent deletes one); ``radio``: every message the CLI accepted is in the
database;
``pool``: ten items, each attempted at most twice, none claimed by a worker that is not
running; ``memory-flat``: no supervisor alive for LONG_S grew more than GROWTH_MIB from
its early samples, nor did the median supervisor (30 s old or more) from the run's first
fifth to its last; ``quiet-cpu``: the supervisors' summed CPU while every agent sleeps is
under QUIET_CPU_PCT of one core.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

from tests.soak.chaostree import POOL, POOL_ITEMS, supervised, supervisors
from tests.soak.harness import SoakTree
from tests.soak.invariants import Violation, check_integrity, check_tree
from tests.soak.treefaults import git

ORPHAN_GRACE_S = 10.0
EARLY_S = (30.0, 90.0)  # a supervisor's early RSS: its samples at these ages (seconds)
LONG_S = 150.0  # a supervisor sampled this long after its start is judged for growth
GROWTH_MIB = 10.0
QUIET_CPU_PCT = 5.0


@dataclass
class Watch:
    """What the checks saw: counts per invariant, violations, tips, RSS samples."""

    box: SoakTree
    pool: str = POOL  # the pool node (dotted under main) and its item count
    pool_items: int = POOL_ITEMS
    checks: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    tips: set[tuple[str, str]] = field(default_factory=set)
    memory: dict[int, list[tuple[float, int]]] = field(default_factory=dict)  # pid: (age, rss)
    fleet: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, rss) at 30+ s
    suspects: dict[tuple[int, int], float] = field(default_factory=dict)  # (pid, step)
    reported: set[int] = field(default_factory=set)

    def fail(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(invariant, detail))

    # -- as it runs -------------------------------------------------------------------

    def look(self) -> None:
        """One round of the continuous checks."""
        self.checks["integrity"] += 1
        self.violations += check_integrity(self.box.db)
        self.checks["one supervisor per node"] += 1
        seen: dict[str, int] = {}
        for proc in supervisors(self.box.repo):
            with contextlib.suppress(psutil.Error, ValueError):  # gone meanwhile
                branch = supervised(proc)
                if branch in seen:
                    self.fail("one-supervisor", f"{branch}: pids {seen[branch]} and {proc.pid}")
                seen[branch] = proc.pid
                age, rss = time.time() - proc.create_time(), proc.memory_info().rss
                self.memory.setdefault(proc.pid, []).append((age, rss))
                if age >= EARLY_S[0]:
                    self.fleet.append((time.monotonic(), rss))
        self.checks["no orphan in a closed step's group"] += 1
        self._orphans()
        self.note_tips()

    def note_tips(self) -> None:
        refs = git(self.box.repo, "for-each-ref", "--format=%(refname:short) %(objectname)",
                   "refs/heads/", check=False)
        for line in refs.splitlines():
            ref, _, sha = line.partition(" ")
            self.tips.add((ref, sha))

    def _orphans(self) -> None:
        """A live process in the group of a closed step row (started after the group's
        leader and before the row closed, so never a later group reusing the number) with
        no open row for that group; a violation once still there ORPHAN_GRACE_S later."""
        last: dict[int, tuple[bool, str, int, float, float]] = {}
        for pgid, ended, node, step_id, started in self.box.sql(
                "SELECT pgid, ended_at, node, step_id, pgid_started FROM steps "
                "WHERE pgid IS NOT NULL ORDER BY step_id"):
            closed = ended is not None
            end = datetime.fromisoformat(str(ended)).timestamp() if closed else 0.0
            last[int(str(pgid))] = (closed, str(node), int(str(step_id)),
                                    float(str(started or 0)), end)
        now, current = time.monotonic(), set()
        for proc in psutil.process_iter(["pid", "status", "create_time"]):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            try:
                pgid = os.getpgid(proc.info["pid"])
            except OSError:
                continue
            closed, node, step_id, started, end = last.get(pgid, (False, "", 0, 0.0, 0.0))
            born = float(proc.info["create_time"])
            if not closed or not started - 0.05 <= born <= end + 0.5:
                continue
            key = (proc.info["pid"], step_id)
            current.add(key)
            first = self.suspects.setdefault(key, now)
            if now - first >= ORPHAN_GRACE_S and key[0] not in self.reported:
                self.reported.add(key[0])
                self.fail("orphan", f"pid {key[0]} lives on in the group {pgid} of step "
                                    f"{step_id} of {node}, which closed (seen for "
                                    f"{now - first:.0f} s)")
        self.suspects = {k: v for k, v in self.suspects.items() if k in current}

    # -- at the end -------------------------------------------------------------------

    def final(self) -> None:
        """Every end-of-run invariant (the tree stopped and healed)."""
        box = self.box
        self.checks["soak invariants (rows, statuses, integrity, no process, bytes)"] += 1
        booted = {str(n) for (n,) in box.sql(
            "SELECT n.node FROM nodes n WHERE n.status = 'exited' AND NOT EXISTS (SELECT 1 "
            "FROM runs r WHERE r.node = n.node) AND EXISTS (SELECT 1 FROM messages m WHERE "
            "m.node = n.node AND m.data LIKE '%before it opened a run%')")}
        for violation in check_tree(box.repo, journal=box.journal):
            if violation.invariant == "node-agrees" and violation.detail.split()[1] in booted:
                self.checks["supervisor lost while booting: exited without a run"] += 1
                continue  # by design: healed exited, with a notice saying so
            self.violations.append(violation)
        self.note_tips()
        self._reachable()
        self._merged_present()
        self._hand_backs()
        self._radio()
        self._pool()

    def resumed(self, parked: list[str], left: list[str]) -> None:
        """``resumable``: every node parked at the end left ``paused`` once resumed."""
        self.checks["parked run resumed"] += len(parked)
        for name in left:
            why = self.box.sql("SELECT metadata FROM events WHERE node = ? AND event = "
                               "'pause' ORDER BY event_id DESC LIMIT 1", f"main.{name}")
            self.fail("resumable", f"main.{name} is still paused after `fractal resume`"
                                   + (f" ({why[0][0]})" if why else ""))

    def _reachable(self) -> None:
        box = self.box
        kept = set(git(box.repo, "rev-list", "--branches", "--glob=refs/fractal/rescue/*",
                       check=False).split())
        ever = {sha: ref for ref, sha in self.tips}
        logs = Path(git(box.repo, "rev-parse", "--git-common-dir", check=False))
        logs = (box.repo / logs if not logs.is_absolute() else logs) / "logs" / "refs" / "heads"
        for log in logs.rglob("*") if logs.is_dir() else []:
            if log.is_file():
                for line in log.read_text(errors="replace").splitlines():
                    parts = line.split()
                    if len(parts) > 1 and set(parts[1]) != {"0"}:
                        ever.setdefault(parts[1], str(log.relative_to(logs)))
        for sha, ref in sorted(ever.items()):
            self.checks["commit reachable"] += 1
            if sha not in kept:
                self.fail("reachable", f"{sha[:10]} (once {ref}) is on no branch and no "
                                       "rescue ref")

    def _merged_present(self) -> None:
        box = self.box
        for child, target, child_sha in box.sql("SELECT child, target, child_sha FROM "
                                                "merges WHERE status = 'merged'"):
            self.checks["merged work present"] += 1
            under = f"soak/{child}/"
            theirs = _files(box.repo, str(child_sha), under)
            ours = _files(box.repo, str(target), under)
            lost = [p for p, blob in theirs.items()
                    if p not in ours or not _contains(box.repo, ours[p], blob)]
            if lost:
                self.fail("merged-present", f"{child} merged into {target}, which lacks "
                                            f"{lost[:3]}")

    def _hand_backs(self) -> None:
        record = self.box.base / "handbacks.jsonl"
        for line in record.read_text().splitlines() if record.exists() else []:
            item = json.loads(line)
            self.checks["hand-back kept the target's files"] += 1
            if item["deleted"]:
                self.fail("hand-back-keeps", f"the merge of {item['target'][:10]} handed back "
                                             f"to {item['node']} left out the target's "
                                             f"{item['deleted'][:3]}")

    def _radio(self) -> None:
        sent = self.box.base / "radio.jsonl"
        stored = {str(s) for (s,) in self.box.sql("SELECT subject FROM messages")}
        for line in sent.read_text().splitlines() if sent.exists() else []:
            self.checks["radio message kept"] += 1
            subject = json.loads(line)["subject"]
            if subject not in stored:
                self.fail("radio", f"message {subject!r} is lost")

    def _pool(self) -> None:
        rows = self.box.sql("SELECT item_id, status, attempts, worker FROM pool_items "
                            "WHERE pool = ?", f"main.{self.pool}")
        self.checks["pool items kept"] += 1
        if len(rows) != self.pool_items:
            self.fail("pool", f"{len(rows)} items in main.{self.pool}, not {self.pool_items}")
        statuses = {str(n): str(s) for n, s in self.box.sql("SELECT node, status FROM nodes")}
        for item, status, attempts, worker in rows:
            self.checks["pool item attempts and claim"] += 1
            if status not in ("open", "claimed", "done", "failed") or int(str(attempts)) > 2:
                self.fail("pool", f"item {item}: {status} after {attempts} attempt(s)")
            if status == "claimed" and statuses.get(str(worker)) == "active":
                self.fail("pool", f"item {item} claimed by {worker}, active on a stopped tree")

    def memory_growth(self) -> tuple[int, float, float | None]:
        """(supervisors judged, the largest growth in MiB of one from its smallest early
        sample to its last, the growth in MiB of the median supervisor from the first
        fifth of the run to the last); a growth over GROWTH_MIB is a ``memory-flat``
        violation."""
        judged, worst = 0, 0.0
        for pid, samples in self.memory.items():
            early = [rss for age, rss in samples if EARLY_S[0] <= age < EARLY_S[1]]
            if not early or samples[-1][0] < LONG_S:
                continue
            judged += 1
            growth = (samples[-1][1] - min(early)) / 2**20
            worst = max(worst, growth)
            self.checks["supervisor memory flat"] += 1
            if growth > GROWTH_MIB:
                self.fail("memory-flat", f"supervisor {pid} grew {growth:.1f} MiB over "
                                         f"{samples[-1][0]:.0f} s")
        fleet = None
        if self.fleet:
            first, last = self.fleet[0][0], self.fleet[-1][0]
            fifth = (last - first) / 5
            early = [rss for when, rss in self.fleet if when <= first + fifth]
            late = [rss for when, rss in self.fleet if when >= last - fifth]
            if fifth > 0 and early and late:
                fleet = (statistics.median(late) - statistics.median(early)) / 2**20
                self.checks["supervisors' median memory flat"] += 1
                if fleet > GROWTH_MIB:
                    self.fail("memory-flat", f"the median supervisor grew {fleet:.1f} MiB "
                                             "from the run's first fifth to its last")
        return judged, worst, fleet

    def quiet_cpu(self, cpu: float | None) -> None:
        self.checks["quiet CPU"] += 1
        if cpu is None:
            self.fail("quiet-cpu", "no supervisor was alive to measure")
        elif cpu >= QUIET_CPU_PCT:
            self.fail("quiet-cpu", f"supervisors used {cpu:.1f} % of one core while every "
                                   "agent slept")


def cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return float(times.user + times.system)
    except psutil.Error:
        return 0.0


def _files(repo: Path, ref: str, under: str) -> dict[str, str]:
    out = git(repo, "ls-tree", "-r", ref, "--", under, check=False)
    files = {}
    for line in out.splitlines():
        meta, _, path = line.partition("\t")
        files[path] = meta.split()[2]
    return files


def _contains(repo: Path, ours: str, theirs: str) -> bool:
    """The target's blob holds the child's (equal, or a log the child appended to later)."""
    if ours == theirs:
        return True
    a = git(repo, "cat-file", "-p", ours, check=False)
    b = git(repo, "cat-file", "-p", theirs, check=False)
    return a.startswith(b) or b.startswith(a)
