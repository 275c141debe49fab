"""Verb-to-reaction latency: pause, stop, approve and finish at each wait point of the loop.

Wait points: an agent running, the inter-iteration sleep, an approval wait, a finish drain
(waiting for a child) and a retry backoff. A pool of ``samples`` nodes is reconfigured for
each wait point (step files and ``config.json`` edited, then ``start --continue``); all of
them are brought to the wait point at once, then each gets the verb in turn, so one
sample is one node (the others sit idle in their own waits meanwhile).

Each cell times verb exit -> reaction, and signal row written -> reaction (the
supervisor's own share; ``verbs`` says how). Where a verb by design acts later (stop and
finish while an agent runs act when the step, or the iteration, ends) the cell times that
hand-over instead: step row closed -> run row closed. Verbs that do nothing at a wait
point (approve outside a gate; stop and finish during a drain; finish during a backoff)
have no cell. docs/benchmarks.md explains each one.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.sandbox import ROOT, BenchError, Sandbox
from bench.verbs import Driver, epoch, until

# One agent for every latency node; the step file's text picks what it does (usage: the
# command protocol's closed usage window, reset an hour ahead).
AGENT = """#!/bin/sh
prompt=$(cat)
case "$prompt" in
  *BENCH-HOLD*) exec sleep 600 ;;
  *BENCH-FAIL*) exit 3 ;;
  *BENCH-WAIT*) while [ ! -e "$BENCH_RELEASE/$NODE_BRANCH" ]; do sleep 0.02; done ;;
  *BENCH-USAGE*) echo "{\\"type\\": \\"usage_limit\\", \\"resets_at\\": $(( $(date +%s) + 3600 )), \\"window\\": \\"five_hour\\"}"; exit 1 ;;
esac
exit 0
"""
GATED = "---\nrequires_approval: true\n---\nnoop\n"
SETTLE = 0.05  # s after a wait point is reached, so the verb lands inside it
DRAIN_SETTLE = 1.0  # s for a finished parent to reach its drain wait (no row marks it)
Reach = Callable[[str, int], None]  # (node, newest step id before the batch) -> at the point


@dataclass
class Cell:
    """One verb at one wait point: ``samples`` verb exit -> reaction, ``signal`` signal row
    written -> reaction (ms; empty when the cell times a hand-over instead)."""

    verb: str
    point: str
    reaction: str
    samples: list[float] = field(default_factory=list)
    signal: list[float] = field(default_factory=list)


@dataclass
class Latency:
    """Runs every cell on one sandbox with a pool of ``samples`` nodes."""

    box: Sandbox
    samples: int
    cells: list[Cell] = field(default_factory=list)
    verb_ms: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.d = Driver(self.box)
        agent = self.box.base / "bench-agent"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        self.release = self.box.base / "release"
        self.release.mkdir()
        self.box.env["BENCH_RELEASE"] = str(self.release)
        self.agent = str(agent)
        self.pool = [f"lat{n}" for n in range(1, self.samples + 1)]
        self.kids = [f"lat{n}.kid" for n in range(1, self.samples + 1)]

    def run(self, log: Callable[[str], None]) -> list[Cell]:
        """Every cell, in wait-point order. Raises BenchError."""
        log(f"latency: a pool of {self.samples} nodes")
        for name in self.pool:
            self.box.add_custom_node(name, {"01-A.md": "noop\n"}, "--no-sync", "--max-iters",
                                     "1000", "--agent", self.agent)
        for point, body in (("agent running", self.agent_running),
                            ("inter-iteration sleep", self.sleeping),
                            ("approval wait", self.approval),
                            ("drain wait", self.draining),
                            ("retry backoff", self.backoff)):
            log(f"latency: {point}")
            body()
        return self.cells

    # -- the pool -------------------------------------------------------------------------

    def _configure(self, steps: dict[str, str], **config: object) -> None:
        """Replace every pool node's steps and set ``config`` keys (others reset)."""
        keys = {"sleep": None, "step_retries": 1, "step_retry_backoff": "10s", **config}
        for name in self.pool:
            node_dir = self.box.repo / ".worktrees" / f"{ROOT}.{name}" / ".fractal" / \
                f"{ROOT}.{name}"
            shutil.rmtree(node_dir / "steps")
            (node_dir / "steps").mkdir()
            for filename, body in steps.items():
                (node_dir / "steps" / filename).write_text(body)
            path = node_dir / "config.json"
            data = json.loads(path.read_text())
            data.update(keys)
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    def _batch(self, names: list[str], *verb: str) -> dict[str, int]:
        """``fractal node VERB NAME`` for every name at once (start, start --continue,
        resume); returns each node's newest step id before. Raises BenchError."""
        before = {name: self._max_step(name) for name in names}
        errors: list[BaseException] = []

        def one(name: str) -> None:
            try:
                self.box.cli("node", verb[0], name, *verb[1:], timeout=120)
            except BaseException as exc:  # re-raised below, in the bench's thread
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise BenchError(str(errors[0]))
        return before

    def _settle_all(self, names: list[str], kill: bool) -> None:
        """Wait until every node's supervisor is gone; ``kill`` parked ones (to continue)."""
        for name in names:
            if kill and self.d.status(name) in ("paused", "active"):
                self.box.cli("node", "kill", name)
            self.d.supervisor_gone(name)

    def _max_step(self, name: str) -> int:
        row = self.d.one("SELECT COALESCE(MAX(step_id), 0) FROM steps WHERE node = ?",
                         f"{ROOT}.{name}")
        return int(str(row[0])) if row else 0

    # -- timing one verb ------------------------------------------------------------------

    def _verb(self, verb: str, name: str) -> float:
        started = time.time()
        done = self.d.verb("node", verb, name)
        self.verb_ms.setdefault(verb, []).append((done - started) * 1e3)
        return done

    def _signal_at(self, name: str, signal: str) -> float:
        row = self.d.one("SELECT MAX(created_at) FROM signals WHERE node = ? AND signal = ?",
                         f"{ROOT}.{name}", signal)
        if row is None or row[0] is None:
            raise BenchError(f"no {signal} signal row for {name}")
        return epoch(row[0])

    def _record(self, cell: Cell, sent: float, reacted: float, signalled: float) -> None:
        cell.samples.append((reacted - sent) * 1e3)
        cell.signal.append((reacted - signalled) * 1e3)

    def _each(self, cell: Cell, before: dict[str, int], reach: Reach,
              reaction: Callable[[str, int], float]) -> None:
        """For each pool node: reach the point, send the verb, time ``reaction(name, at)``."""
        for name in self.pool:
            reach(name, before[name])
            time.sleep(SETTLE)
            since = self.d.last_event_id()
            sent = self._verb(cell.verb, name)
            reacted = reaction(name, since)
            self._record(cell, sent, reacted, self._signal_at(name, cell.verb))

    def _parked(self, name: str, since: int) -> float:
        return self.d.parked_after(name, since)

    def _run_end(self, name: str, _since: int) -> float:
        return self.d.run_closed(name)[0]

    # -- where a node waits ---------------------------------------------------------------

    def _running(self, name: str, _after: int) -> None:
        self.d.running(name)

    def _napping(self, name: str, after: int) -> None:
        """A step newer than ``after`` ran and its iteration closed: the node sleeps."""
        until(lambda: self.d.one("SELECT 1 FROM steps s JOIN iterations i ON i.iter_id = "
                                 "s.iter_id WHERE s.node = ? AND s.step_id > ? AND i.ended_at "
                                 "IS NOT NULL", f"{ROOT}.{name}", after), 60, f"{name} to nap")

    def _gate(self, name: str, after: int) -> int:
        """A gated row newer than ``after`` awaits approval, its agent gone; its id."""
        row = until(lambda: self.d.one("SELECT step_id, pgid FROM steps WHERE node = ? AND "
                                       "step_id > ? AND approved = '' AND ended_at IS NULL",
                                       f"{ROOT}.{name}", after), 60, f"{name}'s gate")
        if row[1] is not None:
            self.d.group_gone_at(int(str(row[1])))
        return int(str(row[0]))

    def _at_gate(self, name: str, after: int) -> None:
        self._gate(name, after)

    def _failed(self, name: str, after: int) -> None:
        """The newest attempt, newer than ``after``, failed: the retry backoff began."""
        until(lambda: self.d.one("SELECT 1 FROM steps WHERE node = ? AND step_id > ? AND "
                                 "status = 'failed' AND step_id = (SELECT MAX(step_id) FROM "
                                 "steps WHERE node = ?)", f"{ROOT}.{name}", after,
                                 f"{ROOT}.{name}"), 60, f"{name} in its retry backoff")

    # -- the wait points ------------------------------------------------------------------

    def agent_running(self) -> None:
        """pause: the step row turns paused, the agent's group is gone. stop / finish act
        when the step / iteration ends: step row closed -> run row closed."""
        row_cell = self._cell("pause", "agent running", "step row closed paused")
        group_cell = self._cell("pause", "agent running", "agent's process group gone")
        self._configure({"01-H.md": "BENCH-HOLD\n"})
        self._batch(self.pool, "start")
        for name in self.pool:
            step_id, pgid = self.d.running(name)
            time.sleep(SETTLE)
            gone = self._watch_group(pgid)
            sent = self._verb("pause", name)
            row = until(self._row("SELECT ended_at FROM steps WHERE step_id = ? AND "
                                  "status = 'paused'", step_id), 30, "the paused row")
            signalled = self._signal_at(name, "pause")
            self._record(row_cell, sent, epoch(row[0]), signalled)
            self._record(group_cell, sent, gone(), signalled)
        self._settle_all(self.pool, kill=True)
        self._configure({"01-W.md": "BENCH-WAIT\n"})
        for verb, what in (("stop", "step"), ("finish", "iteration")):
            cell = self._cell(verb, "agent running", f"acts at the {what}'s end: step row "
                                                      "closed -> run row closed")
            for path in self.release.iterdir():
                path.unlink()
            self._batch(self.pool, "start", "--continue")
            for name in self.pool:
                step_id, _pgid = self.d.running(name)
                self._verb(verb, name)
                (self.release / f"{ROOT}.{name}").touch()
                ended, _status = self.d.run_closed(name)
                closed = self.d.one("SELECT ended_at FROM steps WHERE step_id = ?", step_id)
                assert closed is not None
                cell.samples.append((ended - epoch(closed[0])) * 1e3)
            self._settle_all(self.pool, kill=False)

    def sleeping(self) -> None:
        """pause: the run parks. stop / finish: the run row closes."""
        self._configure({"01-A.md": "noop\n"}, sleep="1h")
        before = self._batch(self.pool, "start", "--continue")
        self._each(self._cell("pause", "inter-iteration sleep", "run parked (pause event)"),
                   before, self._napping, self._parked)
        self._settle_all(self.pool, kill=False)
        before = self._batch(self.pool, "resume")
        self._each(self._cell("stop", "inter-iteration sleep", "run row closed"), before,
                   self._napping, self._run_end)
        self._settle_all(self.pool, kill=False)
        before = self._batch(self.pool, "start", "--continue")
        self._each(self._cell("finish", "inter-iteration sleep", "run row closed"), before,
                   self._napping, self._run_end)
        self._settle_all(self.pool, kill=False)

    def approval(self) -> None:
        """approve: the next step row opens. pause: the gated row closes paused. stop /
        finish: the run row closes."""
        approve = self._cell("approve", "approval wait", "next step row opened")
        self._configure({"01-GATE.md": GATED, "02-NEXT.md": "noop\n"})
        before = self._batch(self.pool, "start", "--continue")
        for _round in range(2):  # two approvals per node: the second gate is a new iteration
            for name in self.pool:
                gate = self._gate(name, before[name])
                time.sleep(SETTLE)
                sent = self._verb("approve", name)
                row = until(self._row(
                    "SELECT s.started_at, g.approved FROM steps s, steps g WHERE s.node = ? "
                    "AND s.step_id > ? AND s.step_name = 'NEXT' AND g.step_id = ?",
                    f"{ROOT}.{name}", gate, gate), 30, "the next step")
                self._record(approve, sent, epoch(row[0]), epoch(row[1]))
                before[name] = gate
        self._each(self._cell("pause", "approval wait", "gated step row closed paused"),
                   before, self._at_gate, self._gate_closed)
        self._settle_all(self.pool, kill=False)
        before = self._batch(self.pool, "resume")
        self._each(self._cell("stop", "approval wait", "run row closed"), before,
                   self._at_gate, self._run_end)
        self._settle_all(self.pool, kill=False)
        before = self._batch(self.pool, "start", "--continue")
        self._each(self._cell("finish", "approval wait", "run row closed"), before,
                   self._at_gate, self._run_end)
        self._settle_all(self.pool, kill=False)

    def _gate_closed(self, name: str, _since: int) -> float:
        row = until(lambda: self.d.one("SELECT ended_at FROM steps WHERE node = ? AND "
                                       "status = 'paused' AND approved = '' ORDER BY step_id "
                                       "DESC", f"{ROOT}.{name}"), 30, f"{name}'s gate paused")
        return epoch(row[0])

    def draining(self) -> None:
        """pause: a parent waiting (after ``finish``) for a running child parks."""
        cell = self._cell("pause", "drain wait", "run parked (pause event)")
        for name in self.pool:
            self.box.cli("node", "init", "kid", "--parent", name, "--no-sync", "--agent",
                         self.agent)
            steps = self.box.repo / ".worktrees" / f"{ROOT}.{name}.kid" / ".fractal" / \
                f"{ROOT}.{name}.kid" / "steps"
            shutil.rmtree(steps)
            steps.mkdir()
            (steps / "01-H.md").write_text("BENCH-HOLD\n")
        self._configure({"01-A.md": "noop\n"}, sleep="1h")
        self._batch(self.kids, "start")
        before = self._batch(self.pool, "start", "--continue")
        for name in self.pool:
            self._napping(name, before[name])
            self.box.cli("node", "finish", name)
        time.sleep(DRAIN_SETTLE)
        for name in self.pool:
            if self.d.status(name) != "active":
                raise BenchError(f"the draining parent {name} is {self.d.status(name)}")
            since = self.d.last_event_id()
            sent = self._verb("pause", name)
            self._record(cell, sent, self.d.parked_after(name, since),
                         self._signal_at(name, "pause"))
        self._settle_all(self.kids + self.pool, kill=True)

    def backoff(self) -> None:
        """pause: the run parks. stop: the run row closes (the failure stands)."""
        self._configure({"01-F.md": "BENCH-FAIL\n"}, step_retries=1, step_retry_backoff="1h")
        before = self._batch(self.pool, "start", "--continue")
        self._each(self._cell("pause", "retry backoff", "run parked (pause event)"), before,
                   self._failed, self._parked)
        self._settle_all(self.pool, kill=False)
        before = self._batch(self.pool, "resume")
        self._each(self._cell("stop", "retry backoff", "run row closed"), before,
                   self._failed, self._run_end)
        self._settle_all(self.pool, kill=False)

    # -- bits -----------------------------------------------------------------------------

    def _row(self, query: str, *params: object) -> Callable[[], tuple[object, ...] | None]:
        """A probe for ``until``: the first row of ``query``, or None."""
        return lambda: self.d.one(query, *params)

    def _cell(self, verb: str, point: str, reaction: str) -> Cell:
        cell = Cell(verb, point, reaction)
        self.cells.append(cell)
        return cell

    def _watch_group(self, pgid: int) -> Callable[[], float]:
        """Start polling group ``pgid`` now; the returned call waits for and returns the
        epoch at which it was first found empty."""
        found: list[float] = []
        thread = threading.Thread(target=lambda: found.append(self.d.group_gone_at(pgid)),
                                  daemon=True)
        thread.start()

        def result() -> float:
            thread.join(35)
            if not found:
                raise BenchError(f"process group {pgid} outlived its pause")
            return found[0]
        return result
