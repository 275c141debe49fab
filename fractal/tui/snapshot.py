"""The dashboard's data: one immutable ``Snapshot`` of the tree, built off the UI thread.

Change detection opens no database: ``Builder.token`` is the (mtime, size) of the
database files, the mtime of the tree brake's latch file, of each active node's
``config.json`` and ``pane.log``, and
(every ``SWEEP_EVERY`` looks) of every node's ``config.json``. The builder reads
(read-only connections) only when it changed, and then only what changed: the high-water
marks of ``store.attention_marks`` name the nodes whose rows differ since the last read,
and only those (and the active nodes, whose clocks and transcripts move) have their
facts re-read and their lines rebuilt; the others keep theirs. It returns the previous
snapshot object itself when the rebuilt one is equal, so the panes skip work. A read that
began right behind a database write keeps no token (the commit may not be visible yet),
so the next look reads again. A node
recorded active whose supervisor is provably gone is shown as such (``gone``), never
written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fractal.domain.attention.rules import Item, NodeFacts, classify, stalled
from fractal.domain.attention_route import for_operator
from fractal.domain.durations import parse_duration
from fractal.domain.signals import decoration
from fractal.domain.termtext import terminal_text
from fractal.domain.views.dashboard import (
    Gauge,
    Live,
    gauge,
    live_detail,
    shown_agent,
    subtree_spends,
)
from fractal.errors import FractalError
from fractal.lifecycle.inbox import Entry, hold_grace, node_facts
from fractal.tree import Tree


@dataclass(frozen=True)
class NodeView:
    """One tree line: branch, status, the live state, spend and its gauge, marks."""

    branch: str
    status: str
    title: str
    live: Live
    reason: str
    spent: float | None
    cap: float | None
    gauge: Gauge | None
    stalled: bool
    config: tuple[tuple[str, str], ...] = ()
    #: The agent setting it runs with (``views.dashboard.shown_agent``), the same for every node.
    agent: str | None = None
    model: str | None = None
    session: str | None = None
    run_started: float | None = None
    iter_started: float | None = None
    #: A pool node's items: (done, failed, claimed, total); None for any other node.
    pool: tuple[int, int, int, int] | None = None

    def detail(self, now: float) -> str:
        return live_detail(self.status, self.live, now, self.reason)


@dataclass(frozen=True)
class FeedLine:
    """One radio message: when, from which node, its subject."""

    created_at: str
    node: str
    channel: str
    subject: str


@dataclass(frozen=True)
class Snapshot:
    """The whole tree at one instant (``built`` epoch s); ``nodes`` parents first."""

    root: str
    built: float = field(compare=False)
    nodes: tuple[NodeView, ...] = ()
    inbox: tuple[Entry, ...] = ()
    feed: tuple[FeedLine, ...] = ()
    token: object = field(default=None, compare=False)
    gone: str = ""  # why there is nothing to show: the tree's database is gone

    def node(self, branch: str) -> NodeView | None:
        return next((n for n in self.nodes if n.branch == branch), None)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _stamp(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _epoch(text: str | None) -> float | None:
    from fractal.store.timefmt import to_epoch  # deferred: start-up cost (2 modules)

    return to_epoch(text) if text else None


SWEEP_EVERY = 5
"""Every this many looks the token also stats every node's ``config.json`` (between
sweeps only the active nodes' files)."""
SPEND_BATCH = 200
"""At most this many ended runs have their spend summed per read (the rest next time)."""
PARTIAL_MAX = 300
"""More changed nodes than this and the builder re-reads the whole tree at once."""
SETTLE_S = 0.05
"""A database file written less than this many seconds before a read began may hold a
commit the read did not see (SQLite updates its WAL index after writing the log), so
that read's token is not kept: the next look reads again, and ``settling`` asks for that
look soon."""

_CARD_KEYS = ("timeout", "iter_timeout", "step_timeout", "max_iters", "max_cost",
              "max_iter_cost", "max_step_cost", "reserve_budget", "max_depth",
              "max_children", "exit_check", "agent", "model")


@dataclass
class Builder:
    """Builds snapshots of ``tree``; keeps the last token, snapshot and config reads."""

    tree: Tree
    last: Snapshot | None = None
    _configs: dict[str, tuple[int, dict[str, object]]] = field(default_factory=dict)
    _steps: dict[str, tuple[int, int]] = field(default_factory=dict)
    _spent: dict[int, float | None] = field(default_factory=dict)  # ended runs' own: final
    _parents: dict[int, int | None] = field(default_factory=dict)  # every run's parent run
    _last_run: int = 0  # the newest run id in _parents
    _token: object = None
    _node_paths: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    _looks: int = 0
    _sweep: tuple[int, ...] = ()
    _config_stamps: dict[str, int] = field(default_factory=dict)
    _marks: Any = None  # store.attention_marks.Marks of the last read
    _facts: dict[str, NodeFacts] = field(default_factory=dict)
    _acks: dict[str, str] = field(default_factory=dict)
    _lines: dict[str, tuple[object, NodeView]] = field(default_factory=dict)
    _items: dict[str, tuple[NodeFacts, list[tuple[Item, bool]]]] = field(default_factory=dict)
    _items_acks: dict[str, str] = field(default_factory=dict)
    _backlog: bool = False  # ended runs whose spend is not summed yet
    _live: Any = None  # store.dashboard.LiveRows of the last read
    settling: bool = False  # the last read began right after a database write

    def _paths(self, branch: str) -> tuple[str, str, str]:
        """(config.json, pane.log, steps/) of ``branch`` as strings, computed once."""
        known = self._node_paths.get(branch)
        if known is None:
            paths = self.tree.node(branch)
            known = (str(paths.config_path), str(paths.pane_log), str(paths.steps_dir))
            self._node_paths[branch] = known
        return known

    def token(self) -> object:
        """The change token: database files and each node's config and transcript mtimes."""
        from fractal.control import latch_path  # deferred: start-up cost (6 modules)
        from fractal.store.follow import db_token  # deferred: start-up cost (11 modules)

        nodes = self.last.nodes if self.last else ()
        self._looks += 1
        if self._looks % SWEEP_EVERY == 1 or len(self._sweep) != len(nodes):
            self._config_stamps = {v.branch: _stamp(self._paths(v.branch)[0]) for v in nodes}
            self._sweep = tuple(self._config_stamps.values())
        stamps = []
        for view in nodes:
            if view.status == "active":
                config, pane, _ = self._paths(view.branch)
                stamps.append((_stamp(config), _stamp(pane)))
        return (db_token(self.tree.db_path), tuple(stamps), self._sweep,
                _stamp(str(latch_path(self.tree))))

    def _config(self, branch: str) -> dict[str, object]:
        name = self._paths(branch)[0]
        stamp = _stamp(name)
        cached = self._configs.get(branch)
        if cached and cached[0] == stamp:
            return cached[1]
        path = Path(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # an agent's config, nested past depth
            data = {}
        data = data if isinstance(data, dict) else {}
        self._configs[branch] = (stamp, data)
        return data

    def _step_count(self, branch: str) -> int | None:
        name = self._paths(branch)[2]
        stamp = _stamp(name)
        cached = self._steps.get(branch)
        if cached and cached[0] == stamp:
            return cached[1]
        steps = Path(name)
        try:
            count = sum(1 for p in steps.iterdir() if p.suffix == ".md" and p.name[:2].isdigit())
        except OSError:
            return None
        self._steps[branch] = (stamp, count)
        return count

    def build(self, *, force: bool = False, now: float | None = None) -> Snapshot:
        """A snapshot; the previous object itself when nothing changed."""
        token = self.token()
        if self.last is not None and not force and token == self._token \
                and not self._backlog:
            return self.last
        from fractal.store.reader import TreeGone  # deferred: start-up cost (10 modules)

        started = time.time()
        try:
            snap = self._read(started if now is None else now, token)
        except TreeGone as exc:  # destroyed under the dashboard: say so, never recreate
            snap = Snapshot(self.tree.root, time.time(), token=token, gone=str(exc))
        # The token after the read (with the node dirs the new snapshot lists) is kept
        # unless a database write landed within SETTLE_S before the read or at any time
        # during it (its stamp is then later than the read's start): the read may not have
        # seen that commit, and keeping the token would hide it until the next write.
        after = self.token()
        db_files = [*(token[0] if isinstance(token, tuple) else ()),
                    *(after[0] if isinstance(after, tuple) else ())]
        self.settling = any(stamp and started - stamp / 1e9 < SETTLE_S
                            for stamp, _ in db_files)
        self._token = None if self.settling else after
        if self.last is not None and snap == self.last:
            return self.last
        self.last = snap
        return snap

    def _read_facts(self) -> tuple[list[NodeFacts], dict[str, str]]:
        """Every node's facts: re-read only for the nodes whose rows changed since the last
        read (and the active ones), the others kept; whole on the first read."""
        from fractal.control import latched  # deferred: start-up cost (6 modules)

        # deferred: start-up cost (1 module)
        from fractal.domain.attention.tree import with_running_below
        from fractal.store.attention_marks import changes  # deferred: start-up cost (11 modules)

        touched, marks = changes(self.tree.db_path, self._marks)
        known = marks.branches()
        if touched is not None:  # active nodes: their clocks, transcripts and supervisors
            touched |= {b for b, f in self._facts.items() if f.status == "active"}
        if touched is None or len(touched) > PARTIAL_MAX:
            facts, acks = node_facts(self.tree, diffstats=False, create=False)
            self._facts = {f.branch: f for f in facts}
        else:
            part, acks = node_facts(self.tree, diffstats=False, create=False, only=touched)
            for branch in touched:
                self._facts.pop(branch, None)
            self._facts.update((f.branch, f) for f in part)
            for branch in [b for b, f in self._facts.items()
                           if b not in known and f.status != "unregistered"]:
                del self._facts[branch]
        self._marks, self._acks = marks, acks
        braked = latched(self.tree)  # the brake is a file: a kept node's facts follow it too
        self._facts = {b: f if f.braked == braked else replace(f, braked=braked)
                       for b, f in self._facts.items()}
        return with_running_below(sorted(self._facts.values(), key=lambda f: f.branch)), acks

    def _classify(self, facts: list[NodeFacts], now: float, acks: dict[str, str]
                  ) -> list[tuple[Item, bool]]:
        """``classify``, node by node: a settled node's items depend on its facts and the
        acknowledgements only, so they are kept while both are unchanged."""

        if acks != self._items_acks:
            self._items = {}
        self._items_acks = acks
        found: list[tuple[Item, bool]] = []
        items: dict[str, tuple[NodeFacts, list[tuple[Item, bool]]]] = {}
        for f in facts:
            known = self._items.get(f.branch)
            if known is not None and f.status != "active" and (known[0] is f or known[0] == f):
                mine = known[1]
            else:
                mine = classify([f], now, acks)
            items[f.branch] = (f, mine)
            found += mine
        self._items = items
        found.sort(key=lambda pair: (pair[0].since, pair[0].node, pair[0].kind.value))

        return for_operator(found, facts, now, hold_grace(self.tree))[0]

    def _subtree_spends(self) -> dict[int, float | None]:
        """Each run's spend with its descendant runs' (``views.dashboard.subtree_spends``: what
        ``fractal node cost spent --run`` sums), from the run tree read a little at a
        time and each run's own spend: an open run's read every time, an ended one's once
        (it never changes again; a big tree's first paint would wait on all of them, so
        they are summed SPEND_BATCH runs per read, the newest first)."""
        # deferred: start-up cost (12 modules)
        from fractal.store.dashboard import live_rows, run_links

        links = run_links(self.tree.db_path, self._last_run)
        for run_id, parent, _ in links:
            self._parents[run_id] = parent
            self._last_run = max(self._last_run, run_id)
        running = [run_id for run_id, _, ended in links if not ended]
        open_runs = set(running)
        todo = sorted((r for r in self._parents if r not in open_runs and r not in self._spent),
                      reverse=True)
        self._backlog = len(todo) > SPEND_BATCH
        self._live = live = live_rows(self.tree.db_path, running + todo[:SPEND_BATCH])
        for run_id in todo[:SPEND_BATCH]:
            self._spent[run_id] = live.spent.get(run_id)
        own = {**self._spent, **{r: live.spent.get(r) for r in running}}
        return subtree_spends(self._parents, own)

    def _read(self, now: float, token: object) -> Snapshot:
        from fractal.agents.base import DEFAULT_AGENT  # deferred: start-up cost (9 modules)
        from fractal.store.pool import pool_progress  # deferred: start-up cost (16 modules)

        facts, acks = self._read_facts()
        found = self._classify(facts, now, acks)
        tree_agent = self._config(self.tree.root).get("agent")
        tree_agent = tree_agent if isinstance(tree_agent, str) else None
        spends = self._subtree_spends()
        live = self._live
        pools = pool_progress(self.tree.db_path)
        views: list[NodeView] = []
        lines: dict[str, tuple[object, NodeView]] = {}
        for f in facts:
            run = live.runs.get(f.branch)
            it = live.iterations.get(f.branch)
            step = live.steps.get(f.branch)
            key = (f, run, it, step, frozenset(live.signals.get(f.branch, ())),
                   spends.get(f.run_id) if f.run_id is not None else None,
                   self._config_stamps.get(f.branch), pools.get(f.branch), tree_agent)
            known = self._lines.get(f.branch)
            if known is not None and f.status != "active" and known[0] == key:
                # nothing of this settled node's line changed (an active one's clock moves)
                views.append(known[1])
                lines[f.branch] = known
                continue
            config = self._config(f.branch)
            signal = None
            if run is not None and f.status == "active":
                shown = decoration(f.status, live.signals.get(f.branch, set()))
                signal = shown[len("active ("):-1] if shown != f.status else None
            max_iters = config.get("max_iters")
            state = Live(run_id=run.run_id if run else None, iteration=it.iter if it else None,
                         max_iters=max_iters if isinstance(max_iters, int) else None,
                         step=step.step if step else None,
                         steps=self._step_count(f.branch) if step else None,
                         step_name=step.step_name if step else None,
                         step_started=_epoch(step.started_at) if step else None,
                         gate=bool(f.gates), signal=signal, gone=f.gone,
                         usage_wait=f.usage is not None,
                         usage_until=f.usage.until if f.usage is not None else None)
            reserve = config.get("reserve_budget")
            spent = spends.get(f.run_id) if f.run_id is not None else None
            try:
                timeout = config.get("step_timeout")
                step_timeout = parse_duration(timeout) if isinstance(timeout, str) else None
            except FractalError:
                step_timeout = None
            quiet = stalled(f, now, step_timeout)  # the inbox's stall rule
            views.append(NodeView(
                branch=f.branch, status=f.status, title=terminal_text(f.title),
                live=state, reason=terminal_text(f.merged_into or f.run_reason), spent=spent,
                cap=f.run_cap,
                gauge=gauge(spent, f.run_cap, reserve if isinstance(reserve, float | int)
                            else None),
                stalled=quiet,
                config=tuple((k, json.dumps(config[k])) for k in _CARD_KEYS
                             if config.get(k) is not None),
                agent=shown_agent(
                    None if run is None else (it.agent if it else None, run.agent),
                    (agent if isinstance(agent := config.get("agent"), str) else None,
                     tree_agent), DEFAULT_AGENT),
                model=(step.model if step else None) or (it.model if it else None),
                session=(step.session if step else None) or (it.session if it else None),
                run_started=_epoch(run.started_at) if run else None,
                iter_started=_epoch(it.started_at) if it else None,
                pool=pools.get(f.branch)))
            lines[f.branch] = (key, views[-1])
        self._lines = lines
        views.sort(key=lambda v: v.branch)
        feed = tuple(FeedLine(m.created_at, m.node, m.channel, terminal_text(m.subject))
                     for m in live.messages)
        inbox = tuple(Entry(item, acked) for item, acked in found)
        return Snapshot(self.tree.root, now, tuple(views), inbox, feed, token)
