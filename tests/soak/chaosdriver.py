"""The chaos driver of ``make soak-tree`` (tests/soak/chaos.py runs it): the fault
schedule, the faults, the verbs in flight and the operator's upkeep.

Faults: a schedule of fault kinds drawn on the seed before the run (each kind at least
MIN_EACH times, placed in the first 60 % of the expected ticks; the rest weighted), one
per tick of TICK seconds on average: pause a node and its subtree (resumed by a later
``resume``), stop, finish or kill a node, approve a waiting gate, close the usage window
for 3 - 8 s (the soak agent reports ``usage_limit`` while the flag file exists), ``tmux
kill-server``, SIGKILL a random supervisor or a random agent's process group. A verb runs
in a thread of its own with a time limit of VERB_TIMEOUT_S, so a slow verb never holds
the next fault back; a fault goes to a node no verb in flight touches (neither it nor an
ancestor nor a descendant), and a kind with nothing to act on now is tried again
RETRY_TICKS ticks later while the tick fires another kind that can act (``fire_one``). Between faults the driver tends the tree as an operator would
(heal with a read, resume what parked on its own, restart what ended with ``node start
--continue``, leftovers committed first); pool workers are the dispatcher's and are never
restarted.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from tests.soak.chaoschecks import Watch, cpu_seconds
from tests.soak.chaostree import Shape, overlaps, supervised, supervisors
from tests.soak.harness import SETTLED, SoakTree, keep_leftovers
from tests.soak.run import _quiesce

TICK = 4.0  # seconds between two faults, on average
QUIET_S = 30.0  # the quiet phase's CPU measurement
VERB_TIMEOUT_S = 90.0
KINDS = ("pause", "resume", "stop", "finish", "kill", "approve", "usage-window",
         "tmux-kill-server", "kill-supervisor", "kill-agent")
WEIGHTS = (3, 3, 2, 2, 1, 3, 1, 0.15, 2, 3)  # kill-server rare: it ends every supervisor
MIN_EACH = 2
RETRY_TICKS = 3  # a kind with nothing to act on comes back this many ticks later
EVERYONE = "*"  # a verb in flight on the whole tree
SETTLE_S = 240.0  # the wind-down's wait for every node to settle
RESUME_S = 120.0  # the wind-down's wait for every parked node to leave paused


def schedule(seed: str, ticks: int) -> list[str]:
    """The fault kinds of ``ticks`` ticks (at least MIN_EACH of every kind): MIN_EACH of
    each kind at random places in the first 60 %, every other tick a weighted draw. Same
    seed, same list."""
    rng = random.Random(f"{seed}:schedule")
    forced = [k for k in KINDS for _ in range(MIN_EACH)]
    out = rng.choices(KINDS, WEIGHTS, k=max(ticks, len(forced)))
    places = rng.sample(range(max(len(forced), int(ticks * 0.6))), len(forced))
    for place, kind in zip(places, forced, strict=True):
        out[place] = kind
    return out


def fire_one(plan: list[str], tick: int, fire: Callable[[str], bool], rng: random.Random,
             deferred: Counter[str]) -> str | None:
    """Fire ``plan[tick]`` (a weighted draw appended past the plan's end) and return the
    kind fired, or None when nothing could act. A kind with nothing to act on now is
    counted in ``deferred`` and comes back RETRY_TICKS ticks later (one pending retry
    per kind), and the tick fires the first other kind, in a weighted random order, that
    has something to act on: a few kinds waiting for a target never starve the rest."""
    if tick >= len(plan):
        plan.append(rng.choices(KINDS, WEIGHTS)[0])
    kind = plan[tick]
    if fire(kind):
        return kind
    deferred[kind] += 1
    if kind not in plan[tick + 1:tick + 1 + RETRY_TICKS]:
        plan.insert(min(tick + RETRY_TICKS, len(plan)), kind)
    others = [(k, w) for k, w in zip(KINDS, WEIGHTS, strict=True) if k != kind]
    while others:
        pick = rng.choices(range(len(others)), [w for _, w in others])[0]
        other, _ = others.pop(pick)
        if fire(other):
            return other
    return None


@dataclass
class Flight:
    """A verb in flight: what it is for, the nodes it touches, its outcome's handler."""

    label: str
    nodes: tuple[str, ...]
    future: Future[int]
    done: Callable[[int], None] | None = None


@dataclass
class Chaos:
    """The driver's state: the tree, its seed, what it did and what it saw."""

    box: SoakTree
    rng: random.Random
    plan: list[str]
    shape: Shape = field(default_factory=Shape)
    watch: Watch = field(init=False)
    sent: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    deferred: Counter[str] = field(default_factory=Counter)
    upkeep: Counter[str] = field(default_factory=Counter)
    paused_by_us: set[str] = field(default_factory=set)
    flights: list[Flight] = field(default_factory=list)
    window_until: float = 0.0
    threads: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8))

    def __post_init__(self) -> None:
        self.watch = Watch(self.box)

    @property
    def flag(self) -> str:
        return str(self.box.base / "window-closed")

    # -- verbs in flight --------------------------------------------------------------

    def _run(self, args: tuple[str, ...], before: Callable[[], None] | None) -> int:
        if before is not None:
            before()
        try:
            return self.box.cli(*args, check=False, timeout=VERB_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            return -1

    def fly(self, label: str, nodes: tuple[str, ...], *args: str,
            done: Callable[[int], None] | None = None,
            before: Callable[[], None] | None = None) -> None:
        """Run ``fractal ARGS`` in a thread; ``done(exit code)`` (-1: timed out) runs in
        the driver's thread once it ended."""
        self.flights.append(Flight(label, nodes, self.threads.submit(self._run, args, before),
                                   done))

    def land(self) -> None:
        """Collect the verbs that ended: their outcomes, and the handlers."""
        for flight in [f for f in self.flights if f.future.done()]:
            self.flights.remove(flight)
            try:
                code = flight.future.result()
            except Exception as exc:  # a broken helper (git) is the driver's, not a fault
                print(f"  driver: {flight.label}: {exc!s:.300}", flush=True)
                code = -2
            if code == -1:
                self.upkeep[f"{flight.label}: timed out"] += 1
            if flight.done is not None:
                flight.done(code)

    def busy(self, name: str) -> bool:
        return any(n == EVERYONE or overlaps(n, name) for f in self.flights for n in f.nodes)

    def statuses(self) -> dict[str, str]:
        rows = self.box.sql("SELECT node, status FROM nodes WHERE node != 'main'")
        return {str(n)[len("main."):]: str(s) for n, s in rows}

    def _pick(self, wanted: set[str]) -> str | None:
        names = [n for n, s in sorted(self.statuses().items())
                 if s in wanted and not self.busy(n)]
        return self.rng.choice(names) if names else None

    # -- faults -----------------------------------------------------------------------

    def inject(self, tick: int) -> None:
        """The fault of ``tick`` (see ``fire_one``)."""
        fired = fire_one(self.plan, tick, self._fire, self.rng, self.deferred)
        if fired is not None:
            self.sent[fired] += 1

    def _fire(self, kind: str) -> bool:
        return bool(getattr(self, "_" + kind.replace("-", "_"))())

    def _count(self, kind: str, then: Callable[[], None] | None = None) -> Callable[[int], None]:
        def done(code: int) -> None:
            if code == 0:
                self.accepted[kind] += 1
                if then is not None:
                    then()
            else:
                self.upkeep[f"{kind} refused or late"] += 1
        return done

    def _pause(self) -> bool:
        active = {n for n, s in self.statuses().items() if s == "active" and not self.busy(n)}
        parents = sorted(n for n in active if any(m.startswith(n + ".") for m in active))
        name = self.rng.choice(parents) if parents and self.rng.random() < 0.5 else \
            self._pick({"active"})
        if name is None:
            return False
        self.fly("pause", (name,), "node", "pause", f"main.{name}",
                 done=self._count("pause", lambda: self.paused_by_us.add(name)))
        return True

    def _resume(self) -> bool:
        """Resume a node this driver paused, else any parked one (a fault parked it)."""
        statuses = self.statuses()
        self.paused_by_us = {n for n in self.paused_by_us if statuses.get(n) == "paused"}
        tops = sorted(n for n, s in statuses.items() if s == "paused" and not self.busy(n)
                      and not any(statuses.get(up) == "paused" for up in _ancestors(n)))
        names = [n for n in tops if n in self.paused_by_us] or tops
        if not names:
            return False
        name = self.rng.choice(names)
        self.paused_by_us.discard(name)
        self.fly("resume", (name,), "node", "resume", f"main.{name}",
                 done=self._count("resume"))
        return True

    def _signal(self, verb: str) -> bool:
        name = self._pick({"active"})
        if name is None:
            return False
        self.fly(verb, (name,), "node", verb, f"main.{name}", done=self._count(verb))
        return True

    def _stop(self) -> bool:
        return self._signal("stop")

    def _finish(self) -> bool:
        return self._signal("finish")

    def _kill(self) -> bool:
        return self._signal("kill")

    def _approve(self) -> bool:
        gates = [(n, s) for n, s in self.box.sql(
            "SELECT node, step_id FROM steps WHERE approved = '' AND ended_at IS NULL")
            if not self.busy(str(n)[len("main."):])]
        if not gates:
            return False
        node, step_id = self.rng.choice(gates)
        self.fly("approve", (str(node)[len("main."):],), "node", "approve", str(node),
                 str(step_id), done=self._count("approve"))
        return True

    def _usage_window(self) -> bool:
        if os.path.exists(self.flag):
            return False
        self.window_until = time.time() + self.rng.uniform(3, 8)
        with open(self.flag, "w", encoding="utf-8") as fh:
            fh.write(str(int(self.window_until) + 1))
        self.accepted["usage-window"] += 1
        return True

    def _tmux_kill_server(self) -> bool:
        code = subprocess.run(["tmux", "-S", str(self.box.socket), "kill-server"],
                              capture_output=True, check=False).returncode
        if code == 0:
            self.accepted["tmux-kill-server"] += 1
        return True

    def _kill_supervisor(self) -> bool:
        procs = [p for p in supervisors(self.box.repo) if not self.busy(_branch_name(p))]
        if not procs:
            return False
        with contextlib.suppress(psutil.Error):
            self.rng.choice(procs).send_signal(signal.SIGKILL)
            self.accepted["kill-supervisor"] += 1
        return True

    def _kill_agent(self) -> bool:
        rows = self.box.sql("SELECT pgid FROM steps WHERE ended_at IS NULL AND pgid IS "
                            "NOT NULL")
        if not rows:
            return False
        with contextlib.suppress(OSError):
            os.killpg(int(str(self.rng.choice(rows)[0])), signal.SIGKILL)
            self.accepted["kill-agent"] += 1
        return True

    # -- upkeep -----------------------------------------------------------------------

    def tend(self) -> None:
        """Keep the tree busy: reopen the window when due, heal, resume what parked on its
        own, restart what ended (its leftovers committed first), start what never did."""
        if os.path.exists(self.flag) and time.time() >= self.window_until:
            os.unlink(self.flag)
        if not any(f.label == "heal" for f in self.flights):
            self.fly("heal", (), "node", "list", "--csv")
        if len(self.flights) > 6:
            return  # the machine is slow: let the verbs in flight land first
        statuses = self.statuses()
        parked = sorted(n for n, s in statuses.items() if s == "paused"
                        and n not in self.paused_by_us and not self.busy(n))
        if len(parked) >= 4 and not self.flights_on_tree():
            self.paused_by_us.clear()  # the brake's resume relaunches those too
            self.fly("tree resume", (EVERYONE,), "resume", done=self._upkept("tree resume"))
        else:
            tops = [n for n in parked if not any(statuses.get(up) == "paused"
                                                 for up in _ancestors(n))]
            for name in self.rng.sample(tops, min(len(tops), 2)):
                self.fly("resume", (name,), "node", "resume", f"main.{name}",
                         done=self._upkept("resume"))
        ended = [n for n, s in statuses.items()
                 if s in SETTLED and not self.shape.is_worker(n) and not self.busy(n)]
        for name in self.rng.sample(ended, min(len(ended), 2)):
            self.fly("restart", (name,), "node", "start", f"main.{name}", "--continue",
                     before=functools.partial(self._keep_leftovers, name),
                     done=self._upkept("restart"))
        idle = [n for n, s in statuses.items()
                if s == "idle" and not self.shape.is_worker(n) and not self.busy(n)]
        for name in idle[:1]:  # a start that failed at first
            self.fly("late start", (name,), "node", "start", f"main.{name}",
                     done=self._upkept("late start"))

    def flights_on_tree(self) -> bool:
        return any(f.nodes for f in self.flights)

    def _upkept(self, what: str) -> Callable[[int], None]:
        def done(code: int) -> None:
            self.upkeep[what if code == 0 else f"{what} refused or late"] += 1
        return done

    def _keep_leftovers(self, name: str) -> None:
        if keep_leftovers(self.box.worktree(name)):  # under the worktree's commit turn
            self.upkeep["leftovers committed"] += 1

    # -- the end ----------------------------------------------------------------------

    def drain(self, limit: float = 2 * VERB_TIMEOUT_S) -> None:
        """Wait for every verb in flight to land (at most ``limit`` seconds)."""
        deadline = time.monotonic() + limit
        while self.flights and time.monotonic() < deadline:
            time.sleep(0.5)
            self.land()

    def quiet_cpu(self) -> float | None:
        """Supervisors' summed CPU (percent of one core) over QUIET_S while every agent
        sleeps on the quiet file; None when no supervisor was left to measure."""
        if os.path.exists(self.flag):
            os.unlink(self.flag)
        quiet = self.box.base / "quiet"
        quiet.write_text("hush")
        time.sleep(15)  # the running agents reach their quiet sleep
        procs = supervisors(self.box.repo)
        before = {p.pid: cpu_seconds(p) for p in procs}
        time.sleep(QUIET_S)
        used = sum(cpu_seconds(p) - before[p.pid] for p in procs
                   if p.pid in before and p.is_running())
        quiet.unlink()
        return None if not procs else 100.0 * used / QUIET_S

    def wind_down(self) -> None:
        """Stop every node and let all settle; then prove every parked run resumable:
        ``fractal resume``, every parked node must leave ``paused`` within RESUME_S
        (``Watch.resumed``), and everything is stopped and settled again. Last, give the
        supervisors time to exit."""
        if os.path.exists(self.flag):
            os.unlink(self.flag)
        self.settle()
        parked = sorted(n for n, s in self.statuses().items() if s == "paused")
        if parked:
            self.box.cli("resume", check=False, timeout=300)
            deadline, left = time.monotonic() + RESUME_S, parked
            while left and time.monotonic() < deadline:
                time.sleep(2)
                self.box.cli("node", "list", "--csv", check=False, timeout=300)
                statuses = self.statuses()
                left = [n for n in left if statuses.get(n) == "paused"]
            self.watch.resumed(parked, left)
            self.settle()
        _quiesce(self.box)

    def settle(self) -> None:
        """``node stop`` of every node (one verb in the main checkout), then heal until
        nothing is active (at most SETTLE_S; a parked node stays parked)."""
        self.box.cli("node", "stop", check=False, timeout=300)
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            self.box.cli("node", "list", "--csv", check=False, timeout=300)
            if not any(s in ("active", "booting") for s in self.statuses().values()):
                break
            time.sleep(2)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _branch_name(proc: psutil.Process) -> str:
    try:
        return supervised(proc)[len("main."):]
    except (psutil.Error, ValueError, IndexError):
        return EVERYONE


