# Over 400 lines: the dashboard is one concept. Its data path, panes and keys all act on
# the one snapshot and selection it holds; split, they reached into each other's state.
"""The ``fractal open`` dashboard: the tree, the selected node, the inbox, the radio.

Data path: one build thread waits for a wake (a watchdog event on the database files,
a verb's result) or 1 s (the poll), then calls ``Builder.build()``, which stats the
database files and node dirs and reads only when they changed, and returns the same
object when nothing did (every RECHECK_S a forced build: a stall, a supervisor gone); the
UI applies a new snapshot only (tree labels updated in place, the tree rebuilt only when
its members change, a pane only when its text changed). Elapsed step times tick on the
UI thread from the snapshot, without reads.
Keys call the lifecycle functions the CLI verbs call, in thread workers, confirmed first
when destructive; the dashboard itself never writes. The merge (``m``) and approve (``a``)
keys show a diffstat read off the UI thread before they ask; the message key (``n``)
prompts for one line; ``o`` hands the terminal to the node's tmux pane. A fault in a key
is saved to a crash log and notified, and the dashboard stays (``tui.verbs``). The tree
pane is its own widget (``tui.treepane.NodeTree``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Static, Tree

from fractal.domain.sandbox import Mode, mode_of
from fractal.domain.signals import Signal
from fractal.errors import FractalError
from fractal.lifecycle.context import open_context
from fractal.lifecycle.inbox import gate_diffstat
from fractal.store.dashboard import History, history
from fractal.tree import Tree as FractalTree
from fractal.tui import render, verbs
from fractal.tui.screens import ConfirmScreen, HelpScreen, PromptScreen
from fractal.tui.snapshot import SETTLE_S, Builder, NodeView, Snapshot
from fractal.tui.treepane import NodeTree
from fractal.tui.watch import DbWatch

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context

    PaneSwitch = Callable[[FractalTree, str], bool]  # True: this tmux client switched
    PaneAttach = Callable[[FractalTree, str], object]  # attach in this terminal until detach

REFRESH_S = 1.0  # the poll: stat the db files and node dirs, read only on a change
RECHECK_S = 15.0  # a forced build: a stall or a supervisor gone is announced by no write
FILTERS = ("all", "attention", "active")

CSS = """
#left { width: 55%; }
#tree { height: 1fr; border: round $primary; }
#inbox { height: auto; max-height: 40%; border: round $warning; }
#feed { height: auto; max-height: 20%; border: round $secondary; }
#node { width: 45%; border: round $accent; }
#card, #explorer, #tail { height: auto; margin-bottom: 1; }
#body.-narrow { layout: vertical; }
#body.-narrow #left { width: 100%; height: 3fr; }
#body.-narrow #node { width: 100%; height: 2fr; }
"""
NARROW_COLUMNS = 100
"""Below this width (a phone's browser, a narrow terminal) the panes stack in one column:
the tree, inbox and radio first, the node pane below."""


class Dashboard(App[None]):
    """The dashboard of ``tree``; ``builder`` and ``history`` are injectable for tests."""

    TITLE = "fractal"
    CSS = CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"), Binding("question_mark", "help", "help"),
        Binding("a", "approve", "approve"), Binding("p", "pause", "pause"),
        Binding("r", "resume", "resume"), Binding("s", "stop", "stop"),
        Binding("f", "finish", "finish"), Binding("k", "kill", "kill"),
        Binding("m", "merge", "merge"), Binding("n", "send", "message"),
        Binding("o", "open_pane", "pane"), Binding("slash", "search", "search"),
        Binding("x", "filter", "filter"), Binding("t", "toggle_retired", "retired"),
    ]

    def __init__(self, tree: FractalTree, *, builder: Any = None,
                 history: Callable[[str], History] | None = None,
                 clock: Callable[[], float] = time.time, live: bool = True) -> None:
        super().__init__()
        self.fractal = tree
        self.builder = builder if builder is not None else Builder(tree)
        self.load_history = history or self._history
        self.clock = clock
        self.live = live
        self.snapshot: Snapshot | None = None
        self.show_retired = False
        self.filter = FILTERS[0]
        self.selected: str | None = None
        self.node_tree = NodeTree(tree.root, id="tree")  # the tree pane
        self.painted: float | None = None  # monotonic instant of the first paint
        self.applied = 0  # how many snapshots the panes have taken
        self.db_watch = DbWatch()
        self._wake = threading.Event()  # set: the build loop builds now
        self._stop = threading.Event()
        self._looping = False
        self.outcomes: list[str] = []  # every verb's result line, as notified
        self.shown: NodeView | None = None  # the node pane's node, as last loaded
        self._pane_keys: dict[str, object] = {}
        self.verb_streams = verbs.VerbStreams()  # sys.stdout/stderr while a verb runs
        self.panes: tuple[Any, Any] | None = None  # the o key's (switch, attach); None: tmux

    # -- layout -----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            with Vertical(id="left"):
                self.node_tree.show_root = True
                self.node_tree.root.expand()
                yield self.node_tree
                yield Static(id="inbox")
                yield Static(id="feed")
            with VerticalScroll(id="node"):
                yield Static(id="card")
                yield Static(id="explorer")
                yield Static(id="tail")
        yield Footer()

    def on_mount(self) -> None:
        unsandboxed = mode_of(self.fractal.root_config()) is Mode.OFF  # `sandbox: off`
        self.query_one("#tree").border_title = "tree (unsandboxed)" if unsandboxed else "tree"
        self.query_one("#inbox").border_title = "inbox"
        self.query_one("#feed").border_title = "radio"
        self.query_one("#node").border_title = "node"
        self.query_one("#tree", Tree).focus()
        self._fit(self.size.width)
        self.apply(self.builder.build(force=True))
        if self.live:
            self.set_interval(REFRESH_S, self._relabel_running)
            self.db_watch.start(self.fractal.db_path, on_change=self._wake.set)
            self._looping = True
            self.build_loop()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        """One column below ``NARROW_COLUMNS`` columns wide, two from there up."""
        with contextlib.suppress(NoMatches):  # a resize before the panes are composed
            self.query_one("#body").set_class(width < NARROW_COLUMNS, "-narrow")

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()
        self.db_watch.close()
        self.verb_streams.close()

    # -- data path --------------------------------------------------------------------

    def refresh_snapshot(self) -> None:
        """Rebuild the snapshot now: wake the build loop when it runs, else build once in
        a thread worker."""
        if self._looping:
            self._wake.set()
        else:
            self.build_once()

    @work(thread=True, group="snapshot")
    def build_loop(self) -> None:
        """The one thread that builds snapshots while the app is live: it waits for a wake
        (a watchdog event on the database files, a verb's result) or ``REFRESH_S`` seconds
        (the poll; 0.1 s after a read that began right behind a write, see
        ``snapshot.SETTLE_S``), builds, and hands a changed snapshot to the UI thread. One builder
        thread means no two builds overlap and a burst of writes costs one build more,
        not one per write."""

        forced = time.monotonic()
        while not self._stop.is_set():
            settling = getattr(self.builder, "settling", False)  # look again soon
            self._wake.wait(2 * SETTLE_S if settling else REFRESH_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            recheck = time.monotonic() - forced >= RECHECK_S
            forced = time.monotonic() if recheck else forced
            try:
                snap = self.builder.build(force=recheck)
            except FractalError:  # a locked database, say: the next wake reads again
                continue
            if snap is not self.snapshot:
                try:
                    self.call_from_thread(self.apply, snap)
                except (RuntimeError, CancelledError):  # the app stopped meanwhile
                    return

    @work(thread=True, exclusive=True, group="snapshot")
    def build_once(self) -> None:

        try:
            snap = self.builder.build()
        except FractalError:  # a locked database, say: the next refresh reads again
            return
        if snap is not self.snapshot:
            self.call_from_thread(self.apply, snap)

    def apply(self, snap: Snapshot) -> None:
        """Show ``snap``: the tree pane (relabelled in place, or rebuilt when its members
        changed), then the inbox, radio and node panes (``_update_panes``)."""
        try:
            self.query_one("#tree", Tree)
        except NoMatches:  # the app is closing: its panes are gone
            return
        previous, self.snapshot = self.snapshot, snap
        if snap.gone:
            self._show_gone(snap.gone)
            return
        views = self._visible(snap)
        first = self.selected is None and bool(views)
        if first:  # nothing selected yet (just opened, no NODE given): the first shown
            self.selected = views[0].branch
        self.selected = self.node_tree.show(views, self.clock(), self.selected,
                                            newly_selected=first)
        self._update_panes(previous, snap)
        self.applied += 1
        if self.painted is None:
            self.painted = time.monotonic()

    def _visible(self, snap: Snapshot) -> list[NodeView]:
        """The nodes the tree pane shows under the filter (retired ones only when shown;
        ``attention``: those with an inbox item; ``active``: active ones)."""
        waiting = {e.item.node for e in snap.inbox}
        out = []
        for view in snap.nodes:
            if view.status == "retired" and not self.show_retired:
                continue
            if self.filter == "attention" and view.branch not in waiting:
                continue
            if self.filter == "active" and view.status != "active":
                continue
            out.append(view)
        return out

    def _update_panes(self, previous: Snapshot | None, snap: Snapshot) -> None:
        """Redraw the inbox and radio panes when their lines changed, and reload the node
        pane when the selected node's line changed, it is active (its clocks, its
        transcript) or the pane shows another node: an unchanged pane is not re-rendered."""
        fresh = previous is None or previous.gone
        if fresh or previous is None or previous.inbox != snap.inbox:
            self._put("#inbox", render.inbox(snap))  # a stall's quiet time moves, not its line
        if fresh or previous is None or previous.feed != snap.feed:
            self._put("#feed", render.feed(snap))
        chosen = snap.node(self.selected) if self.selected else None
        if chosen is None:  # nothing (or a node now gone) selected: clear the pane once
            if fresh or self.shown is not None:
                self.show_node()
        elif fresh or previous is None or chosen.status == "active" \
                or self.shown is None or self.shown.branch != chosen.branch \
                or previous.node(chosen.branch) != chosen:
            self.show_node()

    def _show_gone(self, why: str) -> None:
        """The tree was destroyed under the dashboard: empty panes, and why (notified once)."""
        had_rows = self.node_tree.forget(f"{self.fractal.root} (gone)")
        if had_rows or self.painted is None:
            self.notify(why, severity="error", timeout=30)
        self.query_one("#inbox", Static).update(why)
        self.query_one("#feed", Static).update("")
        self._show(None, None, None)
        if self.painted is None:
            self.painted = time.monotonic()

    def _relabel_running(self) -> None:
        if self.snapshot is not None:
            self.node_tree.relabel_running(self.snapshot.nodes, self.clock())

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        """The highlighted row is the selection (a message about a row the cursor has
        left since, as a tree rebuild posts, is stale and ignored)."""
        if event.node is not event.control.cursor_node:
            return
        branch = event.node.data
        if branch is not None and branch != self.selected:  # the root has no loop
            self.selected = branch
            self.show_node()

    def _history(self, branch: str) -> History:

        return history(self.fractal.db_path, branch)

    @work(thread=True, exclusive=True, group="node")
    def show_node(self) -> None:
        """Load the selected node's history and transcript off the UI thread."""
        branch = self.selected
        snap = self.snapshot
        view = snap.node(branch) if snap and branch else None
        if view is None:
            self.call_from_thread(self._show, None, None, None)
            return

        try:
            hist = self.load_history(view.branch)
        except FractalError:  # gone or locked: the next snapshot says which
            hist = None
        tail = render.tail(self.fractal.node(view.branch).pane_log)
        self.call_from_thread(self._show, view, hist, tail)

    def _show(self, view: NodeView | None, hist: History | None, tail: Any) -> None:
        now = self.clock()
        self.shown = view
        self._put("#card", render.card(view, now))
        self._put("#explorer", render.explorer(hist, now) if view else "")
        self._put("#tail", tail or "")

    def _put(self, pane: str, content: Any) -> None:
        """Update the Static ``pane`` only when ``content`` differs from what it shows (an
        update re-lays out the whole screen: tens of milliseconds on a big tree)."""
        key = (content.plain, content.spans, content.style) if isinstance(content, Text) \
            else content
        before = self._pane_keys.get(pane)
        if before == key:
            return
        try:
            widget = self.query_one(pane, Static)
        except NoMatches:  # the app is closing: its panes are gone
            return
        self._pane_keys[pane] = key
        widget.update(content, layout=not render.same_height(before, key, widget.size.width))

    # -- keys -------------------------------------------------------------------------

    def _target(self) -> NodeView | None:
        if self.snapshot is not None and self.snapshot.gone:
            self.notify(self.snapshot.gone, severity="error")
            return None
        view = self.snapshot.node(self.selected) if self.snapshot and self.selected else None
        if view is None:
            self.notify("select a node first", severity="warning")
        return view

    @work(thread=True, group="verb")
    def run_verb(self, label: str, verb: Callable[[], object]) -> None:
        """Run a lifecycle verb off the UI thread and notify how it went, in the CLI's
        words (``verbs.call_verb``: real streams, a crash log for a fault)."""
        outcome = verbs.call_verb(self.verb_streams, self.fractal.data_dir, label, verb)
        self.outcomes.append(outcome.text)
        self.call_from_thread(self.notify, outcome.text,
                              severity="error" if outcome.failed else "information")
        if not outcome.failed:
            self.call_from_thread(self.refresh_snapshot)

    def confirm_verb(self, question: str, label: str, verb: Callable[[], object]) -> None:
        """Ask ``question``; run ``verb`` (as ``run_verb``) on yes."""
        def done(yes: bool | None) -> None:
            if yes:
                self.run_verb(label, verb)
        self.push_screen(ConfirmScreen(question), done)

    def _signal(self, name: str, confirm: bool) -> None:
        from fractal.lifecycle.steering.signal import send  # deferred: start-up cost (17 modules)

        view = self._target()
        if view is None:
            return
        def verb() -> object:
            return send(self.verb_context(), view.branch, Signal(name))
        if confirm:
            self.confirm_verb(f"{name} {view.branch} and its subtree?", name, verb)
        else:
            self.run_verb(name, verb)

    def action_pause(self) -> None:
        self._signal("pause", confirm=False)

    def action_stop(self) -> None:
        self._signal("stop", confirm=True)

    def action_finish(self) -> None:
        self._signal("finish", confirm=True)

    def action_resume(self) -> None:
        from fractal.lifecycle.steering.resume import resume  # deferred: start-up cost (24 modules)

        view = self._target()
        if view is not None:
            self.run_verb("resume", lambda: resume(self.verb_context(), view.branch))

    def action_kill(self) -> None:
        from fractal.lifecycle.steering.kill import kill  # deferred: start-up cost (23 modules)

        view = self._target()
        if view is not None:
            self.confirm_verb(f"kill {view.branch} and its subtree now (loop, agent, pane)?",
                            "kill", lambda: kill(self.verb_context(), view.branch))

    def action_approve(self) -> None:
        """``a``: show the selected node's gate and its diffstat (read off the UI thread),
        then approve on ``y``."""
        view = self._target()
        if view is not None:
            branch = view.branch
            self.run_worker(lambda: self.prepare("approve", lambda: self._ask_approve(branch)),
                            thread=True, group="verb")

    def prepare(self, label: str, step: Callable[[], object]) -> None:
        """Run a key's preparation (reading a gate, a diffstat) as a verb is run; notify
        only when it failed (call from a worker thread)."""
        outcome = verbs.call_verb(self.verb_streams, self.fractal.data_dir, label, step)
        if outcome.failed:
            self.outcomes.append(outcome.text)
            self.call_from_thread(self.notify, outcome.text, severity="error")

    def _ask_approve(self, branch: str) -> None:
        """Show the newest gate of ``branch`` awaiting approval and its diffstat, then
        approve it on ``y``, as ``fractal node approve BRANCH`` (from a worker thread)."""
        from fractal.lifecycle.approve import approve  # deferred: start-up cost (5 modules)

        gates = [e.item for e in (self.snapshot.inbox if self.snapshot else ())
                 if e.item.node == branch and e.item.kind.value == "gate"]
        if not gates:
            self.call_from_thread(self.notify, f"{branch} has no step awaiting approval",
                                  severity="warning")
            return
        gate = gates[-1]
        step_id = int(str(gate.details.get("step_id")))
        stat = gate_diffstat(self.fractal, branch) or "diffstat unknown"
        question = f"approve {branch}: {gate.summary}\n{stat}"
        self.call_from_thread(self.confirm_verb, question, "approve",
                              lambda: approve(self.verb_context(), branch, step_id))

    def action_merge(self) -> None:
        """``m``: merge the selected node (the diffstat is read off the UI thread)."""
        view = self._target()
        if view is not None:
            branch = view.branch
            self.run_worker(lambda: self.prepare("merge", lambda: self._ask_merge(branch)),
                            thread=True, group="verb")

    def _ask_merge(self, branch: str) -> None:
        """Show what merging ``branch`` brings (its diffstat against its parent), then
        merge on ``y``, as ``fractal node merge BRANCH`` (from a worker thread)."""
        # deferred: start-up cost (38 modules)
        from fractal.lifecycle.merge.squash import merge_then_clean

        stat = gate_diffstat(self.fractal, branch) or "diffstat unknown"
        question = f"merge {branch} into its target (squash)?\n{stat}"

        def verb() -> str:
            return verbs.merge_line(merge_then_clean(self.verb_context(), branch))

        self.call_from_thread(self.confirm_verb, question, "merge", verb)

    def action_send(self) -> None:
        """``n``: ask for a one-line message and send it to the selected node's inbox, as
        ``fractal radio send --node BRANCH`` (its first line is the subject; nothing is
        sent on escape)."""
        from fractal.lifecycle.radio import send  # deferred: start-up cost (4 modules)

        view = self._target()
        if view is None:
            return
        branch = view.branch

        def sent(text: str | None) -> None:
            data = (text or "").strip()
            if not data:
                return

            def verb() -> str:
                uuid = send(self.verb_context(), data, node=branch, to_parent=False,
                            channel=None, subject=data.splitlines()[0], priority=5)
                return f"sent {uuid} to {branch}'s inbox"

            self.run_verb("send", verb)

        self.push_screen(PromptScreen(f"message to {branch} (enter sends, escape cancels):"),
                         sent)

    def action_open_pane(self) -> None:
        """``o``: show the node's tmux pane. Inside tmux this terminal's client switches to
        it (the dashboard keeps running in its own pane); otherwise the app suspends, a
        tmux client attaches in this terminal, and the app comes back when it detaches. A
        node without a pane, or a terminal the app cannot hand over, is refused in a
        notification. ``panes`` (switch, attach) is the seam to tmux (``lifecycle.panes``
        by default)."""


        view = self._target()
        if view is None:
            return
        switch, attach = self.panes if self.panes is not None else _tmux_panes()
        try:
            if switch(self.fractal, view.branch):
                return
            with self.suspend():
                attach(self.fractal, view.branch)
        except FractalError as exc:
            self._refuse(f"open: {exc}")
        except SuspendNotSupported:
            self._refuse(f"open: this terminal cannot be handed to tmux; run `fractal node "
                         f"attach {view.branch}` in another one")
        except Exception as exc:  # fractal's fault: a crash log, and the dashboard stays
            self._refuse(verbs.fault(self.fractal.data_dir, "open", exc).text)

    def _refuse(self, text: str) -> None:
        self.outcomes.append(text)
        self.notify(text, severity="error")

    def _guard(self, label: str, action: Callable[[], object]) -> None:
        """Run a key's ``action`` on the UI thread as the verb keys run theirs: a refusal
        (``FractalError``) is notified as ``LABEL: why``, any other exception is
        fractal's fault, saved to a crash log and notified (``verbs.fault``); the
        dashboard stays."""

        try:
            action()
        except FractalError as exc:
            self._refuse(f"{label}: {exc}")
        except Exception as exc:  # fractal's fault: a crash log, and the dashboard stays
            self._refuse(verbs.fault(self.fractal.data_dir, label, exc).text)

    def action_search(self) -> None:
        """``/``: move the cursor to the next node whose branch holds the typed text (the
        answer is handled under ``_guard`` too)."""
        def move(text: str) -> None:
            pick = self.node_tree.find_after(text, self.selected)
            if pick is None:
                self.notify(f"no node matches {text!r}", severity="warning")
                return
            self.node_tree.move_to(pick)

        def found(text: str | None) -> None:
            if text:
                self._guard("search", lambda: move(text))

        self._guard("search", lambda: self.push_screen(PromptScreen("search nodes:"), found))

    def action_filter(self) -> None:
        """``x``: show the next of ``FILTERS`` (all, attention, active) and redraw."""
        def step() -> None:
            self.filter = FILTERS[(FILTERS.index(self.filter) + 1) % len(FILTERS)]
            self.notify(f"showing: {self.filter}")
            if self.snapshot is not None:
                self.apply(self.snapshot)
        self._guard("filter", step)

    def action_toggle_retired(self) -> None:
        """``t``: show or hide the retired nodes and redraw."""
        def step() -> None:
            self.show_retired = not self.show_retired
            if self.snapshot is not None:
                self.apply(self.snapshot)
        self._guard("retired", step)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def verb_context(self) -> Context:
        """The context the dashboard's verbs act in: its tree, from the repository's main
        checkout, in whatever loop this process runs (the operator's, outside any)."""

        return open_context(self.fractal.repo)


def _tmux_panes() -> tuple[PaneSwitch, PaneAttach]:
    # deferred: start-up cost (2 modules)
    from fractal.lifecycle.panes import attach_here, switch_to

    return switch_to, attach_here


def run_dashboard(tree: FractalTree, select: str | None = None) -> None:
    """Run the dashboard in this terminal until the user quits."""
    app = Dashboard(tree)
    app.selected = select
    app.run()

