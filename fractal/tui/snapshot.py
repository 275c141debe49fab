"""The dashboard's data: one immutable ``Snapshot`` of the tree, built off the UI thread.

Change detection opens no database: ``Watch.token`` is the (mtime, size) of the database
files plus the mtime of each node's ``config.json`` and ``pane.log``; the builder reads
(read-only connections) only when it changed, and returns the previous snapshot object
itself when the rebuilt one is equal, so the panes skip work. A node recorded active
whose supervisor is provably gone is shown as such (``gone``), never written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from fractal.domain.attention import stall_after
from fractal.domain.dashview import Gauge, Live, gauge, live_detail
from fractal.domain.signals import decoration
from fractal.lifecycle.inbox import Entry, tree_facts
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
    from fractal.store.timefmt import to_epoch

    return to_epoch(text) if text else None


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
    _spent: dict[int, float | None] = field(default_factory=dict)  # ended runs: final
    _token: object = None
    _node_paths: dict[str, tuple[str, str, str]] = field(default_factory=dict)

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
        from fractal.store.follow import db_token

        nodes = self.last.nodes if self.last else ()
        stamps = []
        for view in nodes:
            config, pane, _ = self._paths(view.branch)
            stamps.append((_stamp(config), _stamp(pane)))
        return (db_token(self.tree.db_path), tuple(stamps))

    def _config(self, branch: str) -> dict[str, object]:
        name = self._paths(branch)[0]
        stamp = _stamp(name)
        cached = self._configs.get(branch)
        if cached and cached[0] == stamp:
            return cached[1]
        path = Path(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
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
        if self.last is not None and not force and token == self._token:
            return self.last
        snap = self._read(time.time() if now is None else now, token)
        self._token = self.token()  # with the node dirs the new snapshot lists
        if self.last is not None and snap == self.last:
            return self.last
        self.last = snap
        return snap

    def _read(self, now: float, token: object) -> Snapshot:
        from fractal.domain.attention import classify
        from fractal.domain.durations import parse_duration
        from fractal.errors import FractalError
        from fractal.store.dashboard import live_rows
        from fractal.store.pool import pool_progress

        facts, acks = tree_facts(self.tree, diffstats=False)
        found = classify(facts, now, acks)
        newest = [f.run_id for f in facts if f.run_id is not None
                  and not (f.run_ended is not None and f.run_id in self._spent)]
        live = live_rows(self.tree.db_path, newest)
        for f in facts:  # an ended run's spend never changes again: keep it
            if f.run_id is not None and f.run_ended is not None and f.run_id in live.spent:
                self._spent[f.run_id] = live.spent[f.run_id]
        spends = {**self._spent, **live.spent}
        pools = pool_progress(self.tree.db_path)
        views: list[NodeView] = []
        for f in facts:
            config = self._config(f.branch)
            run = live.runs.get(f.branch)
            it = live.iterations.get(f.branch)
            step = live.steps.get(f.branch)
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
                         gate=bool(f.gates), signal=signal, gone=f.gone)
            reserve = config.get("reserve_budget")
            spent = spends.get(f.run_id) if f.run_id is not None else None
            try:
                timeout = config.get("step_timeout")
                step_timeout = parse_duration(timeout) if isinstance(timeout, str) else None
            except FractalError:
                step_timeout = None
            stalled = (f.status == "active" and not f.gone and not f.gates
                       and f.last_write is not None
                       and now - f.last_write > stall_after(step_timeout))
            views.append(NodeView(
                branch=f.branch, status=f.status, title=f.title,
                live=state, reason=f.run_reason, spent=spent, cap=f.run_cap,
                gauge=gauge(spent, f.run_cap, reserve if isinstance(reserve, float | int)
                            else None),
                stalled=stalled,
                config=tuple((k, json.dumps(config[k])) for k in _CARD_KEYS
                             if config.get(k) is not None),
                agent=(it.agent if it else None) or (run.agent if run else None),
                model=(step.model if step else None) or (it.model if it else None),
                session=(step.session if step else None) or (it.session if it else None),
                run_started=_epoch(run.started_at) if run else None,
                iter_started=_epoch(it.started_at) if it else None,
                pool=pools.get(f.branch)))
        views.sort(key=lambda v: v.branch)
        feed = tuple(FeedLine(m.created_at, m.node, m.channel, m.subject)
                     for m in live.messages)
        inbox = tuple(Entry(item, acked) for item, acked in found)
        return Snapshot(self.tree.root, now, tuple(views), inbox, feed, token)
