"""``make soak-tree``: a 30-node tree under a chaos driver for a while, its invariants
checked as it goes and at the end (docs/reliability.md).

The tree: three leads under the root, three mids under each lead, two leaves under each
mid (3 + 9 + 18 = 30 nodes), each on the soak agent (tests/soak/agent.py). Leaves write
journaled chunks and commit them (some behind an approval gate, some pairs writing the
same conflict file, some sending radio messages to their parent); mids and leads merge
their settled children with ``--hand-back`` (a conflict goes back to the child, whose
agent keeps its side and concludes the merge) and write a little work of their own.

Every TICK seconds the driver, on its seeded ``random.Random``, injects one fault:
pause (and later resume) a subtree, stop, finish or kill a node, approve a waiting gate,
close the usage window for a few seconds (the agents' ``usage_limit`` line), ``tmux
kill-server``, SIGKILL a random supervisor or agent. Between faults it keeps the tree
busy as an operator would: it resumes parked nodes (``fractal resume``), restarts ended
ones (``node start --continue``, committing leftovers first).

Checked continuously: ``integrity_check``, never two supervisors for one node, every
branch tip seen (later: reachable from a branch or a rescue ref). At the end (everything
stopped, the tree healed): the soak invariants (tests/soak/invariants.py: rows closed or
parked, statuses, integrity, no process, bytes kept), every commit seen reachable, every
merged child's files in its target, every radio message the CLI accepted in the
database, supervisors' memory over the run, and their summed CPU over a quiet phase
while every agent sleeps.

``python -m tests.soak.chaos --minutes 20 [--seed N]`` (``make soak-tree
SOAK_TREE_MINUTES=20``); the seed is printed first and replays the driver's choices.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.soak.harness import SETTLED, SoakTree
from tests.soak.invariants import Violation, check_integrity, check_tree
from tests.soak.run import _quiesce
from tests.soak.treefaults import add_node, git

TICK = 4.0  # seconds between two faults
QUIET_S = 30.0  # the quiet phase's CPU measurement
LEADS = ("a", "b", "c")


@dataclass
class Chaos:
    """The driver's state: the tree, its seed, what it did and what it saw."""

    box: SoakTree
    rng: random.Random
    faults: Counter[str] = field(default_factory=Counter)
    upkeep: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    tips: set[tuple[str, str]] = field(default_factory=set)
    paused_by_us: set[str] = field(default_factory=set)
    memory: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    window_until: float = 0.0

    @property
    def flag(self) -> Path:
        return self.box.base / "window-closed"

    @property
    def quiet(self) -> Path:
        return self.box.base / "quiet"

    # -- the tree ---------------------------------------------------------------------

    def nodes(self) -> list[str]:
        """Every node's dotted name under ``main`` (``a``, ``a.m0``, ``a.m0.x``, ...)."""
        out = []
        for lead in LEADS:
            out.append(lead)
            for mid in range(3):
                out.append(f"{lead}.m{mid}")
                out += [f"{lead}.m{mid}.x", f"{lead}.m{mid}.y"]
        return out

    def build(self) -> None:
        """Create the 30 nodes, a level at a time (five ``node init`` at once)."""
        rng, box = self.rng, self.box
        common = ("--no-sync", "--step-timeout", "5m", "--step-retry-backoff", "2s",
                  "--wait", "10m")
        plans: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
        for name in self.nodes():
            if name.count(".") < 2:  # a lead or a mid: merge the settled children, a little work
                body = (f"[soak:merge-children] [soak:chunks=1] [soak:pace=0.5] "
                        f"[soak:usage-file={self.flag}] [soak:quiet-file={self.quiet}] "
                        f"[soak:sleep={rng.randint(3, 8)}]\n")
                plans[name] = ({"01-MERGE.md": body}, (*common, "--sleep", "3s"))
                continue
            mid = name.rsplit(".", 1)[0]
            conflict = f" [soak:conflict={mid}]" if rng.random() < 0.5 else ""
            radio = " [soak:radio=1]" if rng.random() < 0.4 else ""
            work = (f"[soak:chunks={rng.randint(1, 4)}] [soak:pace=1] "
                    f"[soak:usage-file={self.flag}] [soak:quiet-file={self.quiet}]"
                    f"{conflict}{radio}\n")
            steps = {"01-WORK.md": work}
            if rng.random() < 0.3:
                steps["02-REVIEW.md"] = ("---\nrequires_approval: true\n---\n"
                                         "[soak:chunks=1] [soak:pace=0.2]\n")
            plans[name] = (steps, (*common, "--sleep", f"{rng.randint(2, 6)}s",
                                   "--max-iters", str(rng.randint(2, 6))))
        with ThreadPoolExecutor(5) as pool:
            for depth in range(3):
                level = [n for n in plans if n.count(".") == depth]
                list(pool.map(lambda n: add_node(box, n, plans[n][0], *plans[n][1]), level))

    def start_all(self) -> None:
        """Start every node, leaves first, ten verbs at a time (one at a time takes minutes
        on a loaded machine)."""
        names = sorted(self.nodes(), key=lambda n: -n.count("."))
        for at in range(0, len(names), 10):
            procs = [subprocess.Popen([sys.executable, "-m", "fractal", "node", "start",
                                       f"main.{name}"], cwd=self.box.repo, env=self.box.env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for name in names[at:at + 10]]
            for proc in procs:
                proc.wait(timeout=300)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A verb as the operator would type it (its refusal is an answer, not a fault)."""
        return self.box.cli(*args, check=False, timeout=120)

    def statuses(self) -> dict[str, str]:
        rows = self.box.sql("SELECT node, status FROM nodes WHERE node != 'main'")
        return {str(n)[len("main."):]: str(s) for n, s in rows}

    # -- faults -----------------------------------------------------------------------

    def inject(self) -> None:
        kinds = ["pause", "resume", "stop", "finish", "kill", "approve", "usage-window",
                 "tmux-kill-server", "kill-supervisor", "kill-agent"]
        weights = [3, 3, 2, 2, 1, 3, 1, 0.5, 2, 3]
        kind = self.rng.choices(kinds, weights)[0]
        if getattr(self, "_" + kind.replace("-", "_"))():
            self.faults[kind] += 1

    def _pick(self, wanted: set[str] | None = None) -> str | None:
        names = [n for n, s in sorted(self.statuses().items()) if wanted is None or s in wanted]
        return self.rng.choice(names) if names else None

    def _pause(self) -> bool:
        name = self._pick({"active"})
        if name is None or self.cli("node", "pause", f"main.{name}").returncode != 0:
            return False
        self.paused_by_us.add(name)
        return True

    def _resume(self) -> bool:
        if not self.paused_by_us:
            return False
        name = self.rng.choice(sorted(self.paused_by_us))
        self.paused_by_us.discard(name)
        return self.cli("node", "resume", f"main.{name}").returncode == 0

    def _signal(self, verb: str) -> bool:
        name = self._pick({"active"})
        return name is not None and self.cli("node", verb, f"main.{name}").returncode == 0

    def _stop(self) -> bool:
        return self._signal("stop")

    def _finish(self) -> bool:
        return self._signal("finish")

    def _kill(self) -> bool:
        return self._signal("kill")

    def _approve(self) -> bool:
        gates = self.box.sql("SELECT node, step_id FROM steps WHERE approved = '' AND "
                             "ended_at IS NULL")
        if not gates:
            return False
        node, step_id = self.rng.choice(gates)
        return self.cli("node", "approve", str(node), str(step_id)).returncode == 0

    def _usage_window(self) -> bool:
        if self.flag.exists():
            return False
        seconds = self.rng.uniform(3, 8)
        self.window_until = time.time() + seconds
        self.flag.write_text(str(int(self.window_until) + 1))
        return True

    def _tmux_kill_server(self) -> bool:
        return subprocess.run(["tmux", "-S", str(self.box.socket), "kill-server"],
                              capture_output=True, check=False).returncode == 0

    def _kill_supervisor(self) -> bool:
        procs = supervisors(self.box.repo)
        if not procs:
            return False
        with contextlib.suppress(psutil.Error):
            self.rng.choice(procs).send_signal(signal.SIGKILL)
            return True
        return False

    def _kill_agent(self) -> bool:
        rows = self.box.sql("SELECT pgid FROM steps WHERE ended_at IS NULL AND pgid IS "
                            "NOT NULL")
        if not rows:
            return False
        with contextlib.suppress(OSError):
            os.killpg(int(str(self.rng.choice(rows)[0])), signal.SIGKILL)
            return True
        return False

    # -- upkeep -----------------------------------------------------------------------

    def tend(self) -> None:
        """Keep the tree busy: reopen the window when due, resume what parked on its
        own, restart what ended (its leftovers committed first)."""
        if self.flag.exists() and time.time() >= self.window_until:
            self.flag.unlink()
        statuses = self.statuses()
        if any(s == "paused" and n not in self.paused_by_us for n, s in statuses.items()) \
                and self.rng.random() < 0.5:
            self.box.heal()
            for name, status in self.statuses().items():
                if status == "paused" and name not in self.paused_by_us:
                    self.cli("node", "resume", f"main.{name}")
                    self.upkeep["resume"] += 1
        ended = [n for n, s in statuses.items() if s in SETTLED]
        for name in self.rng.sample(ended, min(len(ended), 2)):
            worktree = self.box.worktree(name)
            if not (worktree / ".git").exists():
                continue
            if git(worktree, "status", "--porcelain", check=False):
                git(worktree, "add", "-A", check=False)
                git(worktree, "commit", "-q", "--no-verify", "-m", "operator: keep leftovers",
                    check=False)
                self.upkeep["leftovers committed"] += 1
            if self.cli("node", "start", f"main.{name}", "--continue").returncode == 0:
                self.upkeep["restart"] += 1
        for name in [n for n, s in statuses.items() if s == "idle"][:1]:  # a start that
            if self.cli("node", "start", f"main.{name}").returncode == 0:  # failed at first
                self.upkeep["late start"] += 1

    # -- continuous checks ------------------------------------------------------------

    def look(self) -> None:
        self.checks["integrity"] += 1
        self.violations += check_integrity(self.box.db)
        self.checks["one supervisor per node"] += 1
        seen: dict[str, int] = {}
        for proc in supervisors(self.box.repo):
            with contextlib.suppress(psutil.Error):
                branch = _supervised(proc)
                if branch in seen:
                    self.violations.append(Violation(
                        "one-supervisor", f"{branch}: pids {seen[branch]} and {proc.pid}"))
                seen[branch] = proc.pid
                self.memory.setdefault(proc.pid, []).append(
                    (time.time() - proc.create_time(), proc.memory_info().rss))
        refs = git(self.box.repo, "for-each-ref", "--format=%(refname:short) %(objectname)",
                   "refs/heads/", check=False)
        for line in refs.splitlines():
            ref, _, sha = line.partition(" ")
            self.tips.add((ref, sha))

    # -- the end ----------------------------------------------------------------------

    def quiet_cpu(self) -> float | None:
        """Supervisors' summed CPU (percent of one core) over QUIET_S while every agent
        sleeps on the quiet file; None when no supervisor was left to measure."""
        if self.flag.exists():
            self.flag.unlink()
        self.quiet.write_text("hush")
        time.sleep(15)  # the running agents reach their quiet sleep
        procs = supervisors(self.box.repo)
        before = {p.pid: _cpu(p) for p in procs}
        time.sleep(QUIET_S)
        used = sum(_cpu(p) - before[p.pid] for p in procs if p.pid in before and p.is_running())
        self.quiet.unlink()
        return None if not procs else 100.0 * used / QUIET_S

    def wind_down(self) -> None:
        """Stop every node, wait for all to settle (a parked node may stay parked), heal."""
        if self.flag.exists():
            self.flag.unlink()
        for name, status in self.statuses().items():
            if status == "active":
                self.cli("node", "stop", f"main.{name}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            self.box.heal()
            if not any(s in ("active", "booting") for s in self.statuses().values()):
                break
            time.sleep(2)
        _quiesce(self.box)

    def final_checks(self) -> None:
        box = self.box
        self.violations += check_tree(box.repo, journal=box.journal)
        self.checks["soak invariants"] += 1
        keep = git(box.repo, "for-each-ref", "--format=%(objectname)", "refs/heads/",
                   "refs/fractal/rescue/", check=False).split()
        for ref, sha in sorted(self.tips):
            self.checks["commit reachable"] += 1
            if not any(_ancestor(box.repo, sha, tip) for tip in _first(ref, keep, box)):
                self.violations.append(Violation("reachable", f"{ref} at {sha[:10]} is on no "
                                                              "branch and no rescue ref"))
        self._merged_present()
        self._radio()

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
                self.violations.append(Violation("merged-present", f"{child} merged into "
                                                 f"{target}, which lacks {lost[:3]}"))

    def _radio(self) -> None:
        sent = self.box.base / "radio.jsonl"
        if not sent.exists():
            return
        stored = {str(s) for (s,) in self.box.sql("SELECT subject FROM messages")}
        for line in sent.read_text().splitlines():
            self.checks["radio message kept"] += 1
            subject = json.loads(line)["subject"]
            if subject not in stored:
                self.violations.append(Violation("radio", f"message {subject!r} is lost"))

    def memory_growth(self) -> tuple[int, float]:
        """(supervisors alive over 5 minutes, the largest RSS growth in MiB of one from
        its first minute to its last sample)."""
        long_lived, worst = 0, 0.0
        for samples in self.memory.values():
            early = [rss for age, rss in samples if 60 <= age < 120]
            if not early or samples[-1][0] < 300:
                continue
            long_lived += 1
            worst = max(worst, (samples[-1][1] - min(early)) / 2**20)
        return long_lived, worst


def supervisors(repo: Path) -> list[psutil.Process]:
    """The live supervisors of the tree at ``repo`` (never another tree's)."""
    out = []
    inside = f"{repo.resolve()}/.worktrees/"
    for proc in psutil.process_iter(["cmdline", "status"]):
        words = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "_run" not in words:
            continue
        if "--path" in words and words[-1] != "--path" and \
                words[words.index("--path") + 1].startswith(inside):
            out.append(proc)
    return out


def _supervised(proc: psutil.Process) -> str:
    """The branch a supervisor runs (its worktree's name, after ``--path``)."""
    words = proc.cmdline()
    return Path(words[words.index("--path") + 1]).name


def _cpu(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return float(times.user + times.system)
    except psutil.Error:
        return 0.0


def _ancestor(repo: Path, sha: str, tip: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", sha, tip], cwd=repo,
                          capture_output=True, check=False).returncode == 0


def _first(ref: str, keep: list[str], box: SoakTree) -> list[str]:
    """The ref's own tip first (the usual answer), then every other kept tip."""
    own = git(box.repo, "rev-parse", "-q", "--verify", ref, check=False)
    return [own, *[k for k in keep if k != own]] if own else keep


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float,
                        default=float(os.environ.get("SOAK_TREE_MINUTES", "20")))
    parser.add_argument("--seed", default=os.environ.get("FRACTAL_SOAK_SEED")
                        or str(random.SystemRandom().randrange(10**9)))
    args = parser.parse_args(argv)
    print(f"soak-tree seed: {args.seed} (replay: FRACTAL_SOAK_SEED={args.seed} make "
          f"soak-tree SOAK_TREE_MINUTES={args.minutes:g})", flush=True)
    box = SoakTree.create(args.seed, {"SOAK_RADIO": "", "FRACTAL_NOTIFY_IDLE_S": "5"})
    box.env["SOAK_RADIO"] = str(box.base / "radio.jsonl")
    chaos = Chaos(box, random.Random(args.seed))
    started = time.monotonic()
    try:
        chaos.build()
        chaos.start_all()
        began = time.monotonic()  # the chaos phase: SOAK_TREE_MINUTES from here
        print(f"  tree built and started in {began - started:.0f}s", flush=True)
        end = began + args.minutes * 60
        last_report = began
        while time.monotonic() < end:
            time.sleep(TICK * chaos.rng.uniform(0.5, 1.5))
            for step in (chaos.inject, chaos.tend, chaos.look):
                try:
                    step()
                except Exception as exc:  # a verb that timed out: note it, drive on
                    chaos.upkeep[f"driver error ({type(exc).__name__})"] += 1
                    print(f"  driver: {step.__name__}: {exc!s:.300}", flush=True)
            if time.monotonic() - last_report >= 60:
                last_report = time.monotonic()
                print(f"  {round((last_report - began) / 60)} min: "
                      f"{sum(chaos.faults.values())} faults, "
                      f"{len(chaos.violations)} violations, statuses "
                      f"{dict(Counter(chaos.statuses().values()))}", flush=True)
        cpu = chaos.quiet_cpu()
        chaos.wind_down()
        chaos.final_checks()
    finally:
        box.close()
    long_lived, growth = chaos.memory_growth()
    print(f"soak-tree: {args.minutes:g} min, 30 nodes, seed {args.seed}")
    print("  faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(chaos.faults.items()))
          + f" (total {sum(chaos.faults.values())})")
    print("  upkeep: " + ", ".join(f"{k} {v}" for k, v in sorted(chaos.upkeep.items())))
    print("  invariants checked: " + ", ".join(f"{k} {v}" for k, v in
                                               sorted(chaos.checks.items())))
    print(f"  supervisors: {len(chaos.memory)} seen; {long_lived} lived 5+ min, largest RSS "
          f"growth {growth:.1f} MiB; summed CPU while agents sleep "
          + ("n/a" if cpu is None else f"{cpu:.1f} % of one core"))
    print(f"  violations: {len(chaos.violations)}")
    for violation in chaos.violations[:40]:
        print(f"    {violation}")
    return 1 if chaos.violations else 0


if __name__ == "__main__":
    sys.exit(main())
