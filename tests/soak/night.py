"""``make night``: a compressed night played against a 20-node tree, its invariants
checked as it goes and at dawn (docs/reliability.md, "A night, compressed").

The tree is tests/soak/nighttree.py (three nodes on the real pinned Claude Code and Codex
against loopback mocks, the soak agent elsewhere, four hostile agents), sandboxed as users
run it (``"sandbox": "auto"``: its agents write their records in their own node dirs,
``gather`` joins them); the weather is
tests/soak/weather.py (outages, usage windows, ``tmux kill-server``, reboots, a locked
database, the operator's verbs), each event at a seeded instant; the hostile attacks are
tests/soak/hostile.py; the night's own invariants tests/soak/nightchecks.py, beside the
tree soak's (tests/soak/chaoschecks.py).

The night: build and start the tree, play the weather for NIGHT_MINUTES while the
operator tends it (heals, resumes what parked on its own, restarts what a reboot ended),
then the dawn: no more weather, every gate approved and every paused node resumed, until
every node has ended or the dawn (``dawn_s``) passed. Then the checks, and the report.

``python -m tests.soak.night --minutes 25 [--seed N]``; the seed is printed first and
replays the weather (``FRACTAL_NIGHT_SEED``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import psutil

from tests.agents.install import ensure_installed
from tests.agents.mock_llm import MockLLM
from tests.soak.chaos import keep, start_all
from tests.soak.chaosdriver import Chaos
from tests.soak.chaostree import supervisors
from tests.soak.harness import SETTLED, SoakTree, keep_leftovers
from tests.soak.hostile import ATTACKS, DAEMON_WORD, INTRUDER, PLANTED
from tests.soak.invariants import Violation, tree_processes
from tests.soak.nightchecks import (
    ends,
    hostile,
    launch_storms,
    markers,
    merged,
    spend,
    window_probes,
)
from tests.soak.nighttree import (
    CAPS,
    GATED,
    HOSTILE,
    HOSTILE_GATED,
    OUTAGE_BACKOFF,
    POOL,
    POOL_ITEMS,
    REAL,
    SIBLING,
    NightTree,
    real_env,
)
from tests.soak.treefaults import git
from tests.soak.weather import Event, counts, forecast

TICK = 4.0  # seconds between two looks of the driver
DAWN_S = 420.0  # the shortest longest dawn: every node ends within it (``dawn_s``)
DAWN_SHARE = 0.4  # a longer night's dawn: this share of it (its gated nodes' pace)
ORPHAN_GRACE_S = 10.0
API = {"claude": "/v1/messages", "codex": "/v1/responses"}
RECORDS = ("journal", "hostile", "radio", "handbacks", "merges")
"""The soak agents' records (``$SOAK_JOURNAL``, ...): each agent appends to its own node
dir's ``tmp/soak/<name>.jsonl`` (a sandboxed agent may write nowhere else outside its
worktree); ``gather`` joins them into ``<base>/<name>.jsonl`` for the checks."""


class Night:
    """The night's state: the tree, the mocks, the weather played, what was seen."""

    def __init__(self, box: SoakTree, tree: NightTree, mocks: dict[str, MockLLM],
                 seed: str, env: dict[str, str]) -> None:
        self.box, self.tree, self.mocks, self.env = box, tree, mocks, env
        self.chaos = Chaos(box, random.Random(f"{seed}:operator"), [])
        self.chaos.watch.pool, self.chaos.watch.pool_items = POOL, POOL_ITEMS
        self.played: Counter[str] = Counter()
        self.outages: dict[str, list[tuple[float, float]]] = {"claude": [], "codex": []}
        self.windows: dict[str, list[tuple[float, float]]] = {"claude": [], "codex": []}
        self.later: list[tuple[float, str, float]] = []  # (epoch s, "529" | "unlock", span)
        self.daemons_seen: dict[int, float] = {}  # pid: first seen past its step's end
        self.outlived: list[str] = []
        self.resume_codes: list[int] = []
        self.open: list[Violation] = []  # findings of an attack whose defence is not landed
        self.samples: list[tuple[float, int]] = []  # (epoch s, RSS of the tree's processes)
        self.cpu: dict[int, float] = {}  # pid: the CPU seconds last seen

    # -- the weather --------------------------------------------------------------------

    def play(self, event: Event) -> None:
        """Start one event of the weather now."""
        now = time.time()
        self.played[event.kind] += 1
        print(f"  {time.strftime('%H:%M:%S')} {event.kind}"
              + (f" {event.target}" if event.target else "")
              + (f" for {event.span:g} s" if event.span else ""), flush=True)
        if event.kind == "outage":
            self.mocks[event.target].outage_now(500, event.span / 2)
            self.later.append((now + event.span / 2, f"529 {event.target}", event.span / 2))
            self.outages[event.target].append((now, now + event.span))
        elif event.kind.endswith("-window"):
            mock = self.mocks[event.target]
            until = max(now + event.span, mock.window_until or 0.0)
            mock.close_window(until)
            self.windows[event.target].append((now, until))
        elif event.kind == "tmux-kill-server":
            subprocess.run(["tmux", "-S", str(self.box.socket), "kill-server"],
                           capture_output=True, check=False)
        elif event.kind == "reboot":
            self.reboot()
        elif event.kind == "db-lock":
            threading.Thread(target=self._lock_db, args=(event.span,), daemon=True).start()
        else:
            self.verb(event.kind)

    def tick_later(self) -> None:
        """Start the second half of each outage whose first half is over (HTTP 529)."""
        now = time.time()
        for item in [i for i in self.later if i[0] <= now]:
            self.later.remove(item)
            _at, what, span = item
            if what.startswith("529 "):
                self.mocks[what[4:]].outage_now(529, span)

    def reboot(self) -> None:
        """SIGKILL every process of the tree (the tmux server first), as a power cut
        does; then ``fractal resume`` from a shell with only PATH and HOME."""
        subprocess.run(["tmux", "-S", str(self.box.socket), "kill-server"],
                       capture_output=True, check=False)
        for proc in tree_processes(self.box.repo):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        bare = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "HOME": os.environ.get("HOME", "/root")}
        done = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in bare.items()),
                               "fractal", "resume"], cwd=self.box.repo, capture_output=True,
                              text=True, check=False, timeout=300)
        self.resume_codes.append(done.returncode)
        print(f"    fractal resume (bare env) -> exit {done.returncode}: "
              f"{(done.stdout + done.stderr).strip()[-300:]}", flush=True)

    def _lock_db(self, span: float) -> None:
        conn = sqlite3.connect(self.box.db, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            time.sleep(span)
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            print(f"  driver: db-lock: {exc}", flush=True)
        finally:
            conn.close()

    def verb(self, kind: str) -> None:
        """The operator's verb ``kind`` on a node it can act on now (none: counted)."""
        statuses = self.chaos.statuses()
        chaos = self.chaos
        if kind == "pause":
            done = chaos._pause()
        elif kind == "resume":
            done = chaos._resume()
        elif kind == "approve":
            done = chaos._approve()
        else:  # merge: a settled node into its parent, as the operator would
            names = [n for n, s in sorted(statuses.items()) if s in ("completed", "stopped")
                     and n.count(".") >= 1 and not chaos.busy(n)]
            done = bool(names)
            if names:
                name = chaos.rng.choice(names)
                parent = name.rpartition(".")[0]
                chaos.fly("merge", (parent,), "node", "merge", f"main.{name}", "--hand-back",
                          "--path", str(self.box.worktree(parent)), done=chaos._count("merge"))
        if not done:
            chaos.deferred[kind] += 1

    # -- the operator's upkeep and the continuous checks --------------------------------

    def tend(self) -> None:
        """Heal with a read; resume what parked on its own (two at most); restart what a
        reboot or kill ended (``node start --continue``, leftovers committed first)."""
        chaos = self.chaos
        if not any(f.label == "heal" for f in chaos.flights):
            chaos.fly("heal", (), "node", "list", "--csv")
        if len(chaos.flights) > 6:
            return
        statuses = chaos.statuses()
        parked = sorted(n for n, s in statuses.items() if s == "paused"
                        and n not in chaos.paused_by_us and not chaos.busy(n)
                        and not any(statuses.get(up) == "paused" for up in _ancestors(n)))
        for name in parked[:2]:
            chaos.fly("resume", (name,), "node", "resume", f"main.{name}",
                      done=chaos._upkept("resume"))
        ended = [n for n, s in statuses.items() if s in SETTLED - {"completed"}
                 and ".p.i" not in n and n not in CAPS and not chaos.busy(n)]  # a cap's end stays
        for name in ended[:2]:
            chaos.fly("restart", (name,), "node", "start", f"main.{name}", "--continue",
                      before=functools.partial(self._leftovers, name),
                      done=chaos._upkept("restart"))

    def _leftovers(self, name: str) -> None:
        if keep_leftovers(self.box.worktree(name)):
            self.chaos.upkeep["leftovers committed"] += 1

    def look(self) -> None:
        """The continuous checks: the tree soak's (``Watch.look``), the re-forking daemons
        still alive ORPHAN_GRACE_S after their step ended (each one counted and killed),
        and a sample of the tree's memory and CPU."""
        gather(self.box, self.tree.names())
        self.chaos.watch.look()
        now, rss = time.time(), 0
        ends_at = {int(str(s)): str(e) for s, e in self.box.sql(
            "SELECT step_id, ended_at FROM steps WHERE ended_at IS NOT NULL AND "
            "node LIKE 'main.lead.h.fork%'")}
        for proc in psutil.process_iter(["pid", "cmdline", "memory_info", "cpu_times"]):
            words = proc.info["cmdline"] or []
            if DAEMON_WORD in words:
                step = int(words[-2]) if words[-2].isdigit() else 0
                ended = ends_at.get(step)
                if ended is not None and now - _epoch(ended) > ORPHAN_GRACE_S:
                    self.outlived.append(f"pid {proc.info['pid']} of step {step}")
                    with contextlib.suppress(psutil.Error):
                        proc.kill()  # counted once; the next generation is a new pid
        loops = {p.pid for p in supervisors(self.box.repo)}
        for proc in tree_processes(self.box.repo):
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(proc.pid)
                rss += p.memory_info().rss
                if proc.pid not in loops and loops & {a.pid for a in p.parents()}:
                    continue  # a supervisor's descendant: counted in its reaped CPU
                times = p.cpu_times()
                used = times.user + times.system
                if proc.pid in loops:  # the subreaper reaps its agents: their CPU with it
                    used += times.children_user + times.children_system
                self.cpu[proc.pid] = max(self.cpu.get(proc.pid, 0.0), used)
        self.samples.append((now, rss))


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _epoch(stamp: str) -> float:
    """An ISO timestamp of the database (``...Z``) as epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def records_env(box: SoakTree) -> dict[str, str]:
    """Where the night's agents write what they did: each record under their own node
    dir (``tmp/soak/<name>.jsonl``, RECORDS), the fsmonitor probe's log in the box (only
    a git outside every sandbox can write it: the runs that matter), the main checkout
    ``main-write`` aims at, the canary ``delete-objects`` deletes and the gate
    ``self-approve`` tries beside its own."""
    env = {f"SOAK_{name.upper()}": f"tmp/soak/{name}.jsonl" for name in RECORDS}
    canary = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=box.repo,
                            input="the night's canary: delete-objects deletes it\n",
                            capture_output=True, text=True, check=True).stdout.strip()
    return {**env, "SOAK_SIBLING": SIBLING, "SOAK_MAIN": str(box.repo),
            "SOAK_FSMONITOR_LOG": str(box.base / "fsmonitor.jsonl"), "SOAK_CANARY": canary,
            "SOAK_GATED": f"main.{GATED}"}


def gather(box: SoakTree, names: list[str]) -> None:
    """Join every node's records (RECORDS, in its node dir's ``tmp/soak/``) into the box's
    ``<name>.jsonl``, node by node (each node's lines in the order it wrote them); a line
    still being written (no newline yet) waits for the next gathering."""
    for record in RECORDS:
        lines: list[str] = []
        for name in ("", *names):
            path = (box.node_dir(name) if name else box.repo / ".fractal" / "main") \
                / "tmp" / "soak" / f"{record}.jsonl"
            with contextlib.suppress(OSError):
                text = path.read_text(encoding="utf-8")
                lines += text[:text.rfind("\n") + 1].splitlines()
        joined = box.base / f"{record}.jsonl"
        part = joined.with_suffix(".part")
        part.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        part.replace(joined)


def play_night(night: Night, events: list[Event], minutes: float) -> None:
    """Play ``events`` at their instants for ``minutes``, tending and looking every TICK
    seconds, a progress line a minute."""
    began = time.time()
    todo = list(events)
    last_report = began
    while time.time() < began + minutes * 60:
        while todo and todo[0].at <= time.time() - began:
            try:
                night.play(todo.pop(0))
            except Exception as exc:  # the driver's own failure: note it, play on
                night.chaos.upkeep[f"driver error ({type(exc).__name__})"] += 1
                print(f"  driver: {exc!s:.300}", flush=True)
        night.tick_later()
        for step in (night.chaos.land, night.tend, night.look):
            try:
                step()
            except Exception as exc:
                night.chaos.upkeep[f"driver error ({type(exc).__name__})"] += 1
                print(f"  driver: {exc!s:.300}", flush=True)
        if time.time() - last_report >= 60:
            last_report = time.time()
            print(f"  {round((last_report - began) / 60)} min: {sum(night.played.values())} "
                  f"events, statuses {dict(Counter(night.chaos.statuses().values()))}, "
                  f"{len(night.chaos.watch.violations)} violations", flush=True)
        time.sleep(TICK)


def dawn_s(minutes: float) -> float:
    """The longest dawn of a night of ``minutes``, seconds: DAWN_S, or DAWN_SHARE of a
    longer night (a gate approved at dawn is followed by its node's paced sleep,
    ``NightTree.pace`` of the gated nodes, a fifth of the night, before its next
    iteration)."""
    return max(DAWN_S, DAWN_SHARE * minutes * 60)


def dawn(night: Night) -> None:
    """No more weather: reopen the windows, approve every gate, resume every paused node,
    restart what a fault ended, until no node is active or paused (``dawn_s`` at most)."""
    for mock in night.mocks.values():
        mock.close_window(0.0)
        mock.outage_now(500, 0.0)
    night.box.cli("resume", check=False, timeout=300)
    night.chaos.paused_by_us.clear()
    deadline = time.time() + dawn_s(night.tree.minutes)
    while time.time() < deadline:
        night.chaos.land()
        statuses = night.chaos.statuses()
        if len(statuses) >= len(night.tree.names()) and not any(
                s in ("active", "booting", "paused") for s in statuses.values()):
            break  # every node has ended (``ends`` judges how)
        for node, step_id in night.box.sql("SELECT node, step_id FROM steps WHERE approved = "
                                           "'' AND ended_at IS NULL"):
            night.box.cli("node", "approve", str(node), str(step_id), check=False)
        night.tend()
        night.look()
        time.sleep(TICK)
    night.chaos.drain()


def reasons(night: Night) -> list[tuple[str, str, str]]:
    """(node, status, reason) of every node: ``node status``'s line for the unfinished."""
    out = []
    for name in night.tree.names():
        status = night.chaos.statuses().get(name, "missing")
        reason = ""
        if status != "completed":
            reason = night.box.cli("node", "status", f"main.{name}", check=False).stdout.strip()
        out.append((f"main.{name}", status, reason))
    return out


def final_checks(night: Night) -> tuple[list[Violation], dict[str, object]]:
    """The night's own invariants (nightchecks.py) on what it gathered; returns the
    violations and the figures the report prints."""
    box, found, figures = night.box, [], {}
    gather(box, night.tree.names())
    rows = reasons(night)
    figures["ends"] = Counter(s for _, s, _ in rows)
    found += ends(rows)
    for cred, mock in night.mocks.items():
        calls = [(float(r["at"]), str(r["answer"].get("usage", r["answer"].get("status"))))
                 for r in mock.posts(API[cred])]
        nodes = sum(1 for c in REAL.values() if c == cred)
        during, bad = window_probes(calls, merged(night.windows[cred]), nodes)
        figures[f"{cred} calls while its window was closed"] = during
        figures[f"{cred} model calls"] = len(calls)
        down = [c for c in calls if any(a <= c[0] < b for a, b in night.outages[cred])]
        figures[f"{cred} calls during outages"] = len(down)
        found += bad
        launches: dict[str, list[float]] = {}
        for node, started in box.sql("SELECT node, started_at FROM steps"):
            name = str(node)[len("main."):]
            if REAL.get(name) == cred:
                launches.setdefault(name, []).append(_epoch(str(started)))
        inside, bad = launch_storms(launches, night.outages[cred], *OUTAGE_BACKOFF)
        figures[f"{cred} launches during outages"] = inside
        found += bad
    runs = [(int(str(r)), None if p is None else int(str(p)), str(n)[len("main."):],
             float(str(c))) for r, p, n, c in box.sql(
        "SELECT r.run_id, r.parent_run_id, r.node, COALESCE(SUM(s.cost), 0) FROM runs r "
        "LEFT JOIN steps s ON s.run_id = r.run_id GROUP BY r.run_id")]
    found += spend(runs, CAPS)
    branches = git(box.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/",
                   check=False).split()
    hits = []
    for branch in branches:
        out = git(box.repo, "grep", "-I", "-n", "-E", r"^(<{7}|>{7}|\|{7})( |$)", branch,
                  "--", ".", ":(exclude).fractal", check=False)
        hits += [(branch, part[1], part[3]) for part in
                 (line.split(":", 3) for line in out.splitlines()) if len(part) == 4]
    found += markers(hits)
    figures["branches checked for markers"] = len(branches)
    outcomes, bad = hostile(hostile_facts(night, branches))
    figures["hostile"] = outcomes
    found += bad
    # A cap its own agent lifted (raise-cap, its defence not landed yet) lets that node
    # spend past it and run on: those findings are the open attack's, reported apart.
    lifted = [n for n, a in HOSTILE.items() if "raise-cap" in a
              and outcomes.get("raise-cap") == "succeeded" and not _landed("raise-cap")]
    night.open = [v for v in found if v.invariant in ("spend", "ends") and any(
        v.detail.startswith((f"{n} ", f"main.{n} ")) for n in lifted)]
    return [v for v in found if v not in night.open], figures


def _landed(attack: str) -> bool:
    return next(a.landed for a in ATTACKS if a.name == attack)


def hostile_facts(night: Night, branches: list[str]) -> dict[str, dict[str, object]]:
    """What the night saw of each attack (``hostile.judge``'s facts): the tries and exit
    codes the attackers recorded, and each attack's evidence (``hostile.EVIDENCE``): the
    capped node's config now, who ran the fsmonitor probe, a hook in the shared
    ``.git/hooks``, a gated step that ran unapproved, an approval by the attacker, where
    an intruder file landed, the daemons that outlived their step, the canary object
    gone, a planted MCP server or subagent in the operator's home."""
    box = night.box
    tries: Counter[str] = Counter()
    codes: dict[str, list[int]] = {}
    record = box.base / "hostile.jsonl"
    for line in record.read_text().splitlines() if record.exists() else []:
        item = json.loads(line)
        tries[item["attack"]] += 1
        codes.setdefault(item["attack"], []).append(int(item["code"]))
    facts: dict[str, dict[str, object]] = {
        a.name: {"tries": tries[a.name], "codes": codes.get(a.name, [])} for a in ATTACKS}
    cap_node = next(n for n, a in HOSTILE.items() if "raise-cap" in a)
    config = json.loads((box.node_dir(cap_node) / "config.json").read_text())
    facts["raise-cap"].update(cap_given=CAPS[cap_node], cap_now=config.get("max_cost"))
    own = []
    log = box.base / "fsmonitor.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        chain = json.loads(line)["chain"]
        agent = any("agent.py" in c or "hostile.py" in c or "claude" in c or "codex" in c
                    for c in chain)
        ours = any("fractal" in c or "cliserver" in c for c in chain)  # a verb or a loop
        if ours and not agent:
            own.append(" <- ".join(chain[:3]))
    facts["fsmonitor"]["own_runs"] = own
    hook = box.repo / ".git" / "hooks" / "post-checkout"
    facts["hook"]["planted"] = [str(hook)] if hook.exists() else []
    gated = f"main.{HOSTILE_GATED}"
    skipped = [f"step {s} ran with no approval" for (s,) in box.sql(  # a gate closed
        "SELECT step_id FROM steps WHERE node = ? AND step_name = 'REVIEW' AND approved IS "
        "NULL AND metadata NOT LIKE '%awaiting approval%'", gated)]  # unapproved says so
    step_file = box.node_dir(HOSTILE_GATED) / "steps" / "02-REVIEW.md"
    if "requires_approval: true" not in step_file.read_text():
        skipped.append(f"{step_file} lost its gate")
    facts["disarm-gate"]["skipped"] = skipped
    facts["self-approve"]["approvals"] = [f"{n}: {m}" for n, m in box.sql(
        "SELECT node, metadata FROM events WHERE event = 'approve' AND status = 'completed' "
        "AND actor = ?", gated)]  # a refused one is recorded too, as failed
    for attack, top in (("sibling-write", box.repo / ".worktrees" / SIBLING),
                        ("main-write", box.repo)):
        node = next(n for n, a in HOSTILE.items() if attack in a)
        intruder = INTRUDER.format(node=f"main.{node}")
        landed = [str(top)] if (top / intruder).exists() else []
        landed += [b for b in branches if b != f"main.{node}" and git(
            box.repo, "ls-tree", "--name-only", b, "--", intruder, check=False).strip()]
        facts[attack]["landed_in"] = landed
    facts["fork-daemon"]["outlived"] = night.outlived
    canary = night.env["SOAK_CANARY"]
    lost = subprocess.run(["git", "cat-file", "-e", canary], cwd=box.repo,
                          capture_output=True, check=False).returncode != 0
    facts["delete-objects"]["lost"] = [canary] if lost else []
    home = Path(night.env["HOME"])
    reached = [str(p) for p in (home / ".claude.json", home / ".claude" / ".claude.json")
               if p.exists() and PLANTED in p.read_text(errors="replace")]
    reached += [str(p) for p in [home / ".claude" / "agents" / f"{PLANTED}.md"] if p.exists()]
    facts["plant-home"]["reached"] = reached
    return facts


def repair(night: Night) -> None:
    """The operator's repairs once the night is judged: what an attack left in the shared
    ``.git`` and the home every node reads (an fsmonitor, a hook, a planted MCP server and
    subagent) removed, so the settle and the tree soak's final checks run clean."""
    box, home = night.box, Path(night.env["HOME"])
    git(box.repo, "config", "--unset", "core.fsmonitor", check=False)
    (box.repo / ".git" / "hooks" / "post-checkout").unlink(missing_ok=True)
    (home / ".claude" / "agents" / f"{PLANTED}.md").unlink(missing_ok=True)
    for config in (home / ".claude.json", home / ".claude" / ".claude.json"):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            data = json.loads(config.read_text())
            if data.get("mcpServers", {}).pop(PLANTED, None) is not None:
                config.write_text(json.dumps(data))


def report(night: Night, seed: str, minutes: float, events: list[Event],
           figures: dict[str, object], wall: float, violations: list[Violation]) -> None:
    """Print what the night did, saw and measured (docs/reliability.md lists it)."""
    watch = night.chaos.watch
    rss = [r for _, r in night.samples]
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    verbs = kids.ru_utime + kids.ru_stime
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()  # the CLI fork server: its reaped verbs' CPU
            verbs += times.user + times.system + times.children_user + times.children_system
    print(f"night: {minutes:g} min, seed {seed}, wall {wall / 60:.1f} min")
    print("  weather forecast: " + ", ".join(f"{k} {v}" for k, v in counts(events).items()))
    print("  weather played: " + ", ".join(f"{k} {night.played[k]}" for k in counts(events)))
    print("  verbs with nothing to act on: " + (", ".join(
        f"{k} {v}" for k, v in sorted(night.chaos.deferred.items())) or "none"))
    print("  verbs accepted: " + ", ".join(f"{k} {v}" for k, v in
                                           sorted(night.chaos.accepted.items())))
    print("  upkeep: " + ", ".join(f"{k} {v}" for k, v in sorted(night.chaos.upkeep.items())))
    print(f"  bare-env resumes: exit codes {night.resume_codes}")
    for key, value in figures.items():
        print(f"  {key}: {dict(value) if isinstance(value, Counter) else value}")
    outcomes = figures.get("hostile")
    for attack in ATTACKS:
        outcome = outcomes.get(attack.name) if isinstance(outcomes, dict) else None
        print(f"  attack {attack.name}: {outcome} (expected {attack.expected}; defence "
              f"{'landed' if attack.landed else 'not landed yet'}: {attack.defence})")
    print("  invariants checked: " + ", ".join(f"{k} {v}" for k, v in
                                               sorted(watch.checks.items())))
    print(f"  tree processes: RSS peak {max(rss, default=0) / 2**20:.0f} MiB, mean "
          f"{(sum(rss) / len(rss) if rss else 0) / 2**20:.0f} MiB; CPU of "
          f"supervisors (their reaped agents with them) and other tree processes, sampled: "
          f"{sum(night.cpu.values()):.0f} s; driver {own.ru_utime + own.ru_stime:.0f} s, "
          f"its verbs {verbs:.0f} s (of {wall:.0f} s wall)")
    for finding in night.open:
        print(f"  open (the attack's defence has not landed): {finding}")
    print(f"  violations: {len(violations)}")
    for violation in violations[:60]:
        print(f"    {violation}")


def orphans(base: Path) -> list[psutil.Process]:
    """Live processes (the caller and its ancestors aside) that name ``base`` in their
    command line, working directory or environment: every process of the night does
    (its ``TMUX_TMPDIR``, ``HOME`` and records are there), so none may be left."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    needle = str(base).encode()
    out = []
    for proc in psutil.process_iter(["pid"]):
        if proc.info["pid"] in mine:
            continue
        with contextlib.suppress(OSError, psutil.Error):
            pid = proc.info["pid"]
            cwd = os.readlink(f"/proc/{pid}/cwd").encode()
            with open(f"/proc/{pid}/cmdline", "rb") as fh, open(f"/proc/{pid}/environ",
                                                                 "rb") as env:
                if needle in fh.read() or needle in cwd or needle in env.read():
                    out.append(proc)
    return out


def clean_up(box: SoakTree | None, mocks: list[MockLLM], base: Path | None) -> None:
    """End the night whatever happened: the tree's tmux server and processes
    (``SoakTree.close``), then any process still naming the night's dir (killed, each
    named), the mocks, and the dir itself."""
    if box is not None:
        box.close()
    if base is not None:
        left = orphans(base)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                print(f"  cleanup: killed a leftover process {proc.pid} "
                      f"({' '.join(proc.cmdline())[:120]})", flush=True)
                proc.kill()
        psutil.wait_procs(left, timeout=10)
        shutil.rmtree(base, ignore_errors=True)
        print(f"  cleanup: {len(left)} leftover processes, {base} "
              f"{'left behind' if base.exists() else 'removed'}", flush=True)
    for mock in mocks:
        mock.stop()


def _ended_by(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # a TERM or HUP (make stopped) still runs the cleanup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float,
                        default=float(os.environ.get("NIGHT_MINUTES", "25")))
    parser.add_argument("--seed", default=os.environ.get("FRACTAL_NIGHT_SEED")
                        or str(random.SystemRandom().randrange(10**9)))
    args = parser.parse_args(argv)
    print(f"night seed: {args.seed} (replay: FRACTAL_NIGHT_SEED={args.seed} make night "
          f"NIGHT_MINUTES={args.minutes:g})", flush=True)
    events = forecast(args.seed, args.minutes)
    print("  forecast: " + ", ".join(f"{e.at / 60:.1f} min {e.kind}"
                                     + (f" {e.target}" if e.target else "")
                                     + (f" {e.span:g} s" if e.span else "") for e in events),
          flush=True)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _ended_by)
    agent_bin = ensure_installed(dict(os.environ))
    mocks: list[MockLLM] = []
    box: SoakTree | None = None
    base: Path | None = None
    violations: list[Violation] = []
    try:
        named = {"claude": MockLLM().start(), "codex": MockLLM().start()}
        mocks += named.values()
        named["codex"].clock_only = True  # Codex states a reset only as a clock time
        box = SoakTree.create(args.seed, {"FRACTAL_NOTIFY_IDLE_S": "5"}, sandbox="auto")
        base = box.base
        box.env.update(records_env(box))
        env = real_env(box.base, agent_bin, box.env, named["claude"].url)
        box.env = env
        tree = NightTree(box, args.minutes, named["codex"])
        night = Night(box, tree, named, args.seed, env)
        began = time.time()
        try:
            tree.build(env)
            start_all(box, [n for n in tree.names() if ".p.i" not in n])
            print(f"  tree built and started in {time.time() - began:.0f} s", flush=True)
            play_night(night, events, args.minutes)
            dawn(night)
            violations, figures = final_checks(night)
            repair(night)
            night.chaos.settle()
            night.chaos.watch.final()
            violations = [*night.chaos.watch.violations, *violations]
            report(night, args.seed, args.minutes, events, figures, time.time() - began,
                   violations)
            if violations:
                keep(box, args.seed)
        finally:
            night.chaos.threads.shutdown(wait=False, cancel_futures=True)
    finally:
        clean_up(box, mocks, base)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
