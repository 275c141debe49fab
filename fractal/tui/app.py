"""The ``fractal open`` dashboard: the tree, the selected node, the inbox, the radio.

Data path: one build thread waits for a wake (a watchdog event on the database files,
a verb's result) or 1 s (the poll), then calls ``Builder.build()``, which stats the
database files and node dirs and reads only when they changed, and returns the same
object when nothing did (every RECHECK_S a forced build: a stall, a supervisor gone); the
UI applies a new snapshot only (tree labels updated in place, the tree rebuilt only when
its members change, a pane only when its text changed). Elapsed step times tick on the
UI thread from the snapshot, without reads.
Keys call the lifecycle functions the CLI verbs call, in thread workers, confirmed first
when destructive; the dashboard itself never writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode

from fractal.store.dashboard import History
from fractal.tree import Tree as FractalTree
from fractal.tui import flows, render, verbs
from fractal.tui.screens import ConfirmScreen, HelpScreen
from fractal.tui.snapshot import SETTLE_S, Builder, NodeView, Snapshot
from fractal.tui.watch import DbWatch

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context

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
"""


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
        self._tree_nodes: dict[str, TreeNode[str]] = {}
        self._members: tuple[str, ...] = ()
        self._views: list[NodeView] = []
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
        with Horizontal():
            with Vertical(id="left"):
                tree: Tree[str] = Tree(self.fractal.root, id="tree")
                tree.show_root = True
                tree.root.expand()
                yield tree
                yield Static(id="inbox")
                yield Static(id="feed")
            with VerticalScroll(id="node"):
                yield Static(id="card")
                yield Static(id="explorer")
                yield Static(id="tail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tree").border_title = "tree"
        self.query_one("#inbox").border_title = "inbox"
        self.query_one("#feed").border_title = "radio"
        self.query_one("#node").border_title = "node"
        self.query_one("#tree", Tree).focus()
        self.apply(self.builder.build(force=True))
        if self.live:
            self.set_interval(REFRESH_S, self._relabel_running)
            self.db_watch.start(self.fractal.db_path, on_change=self._wake.set)
            self._looping = True
            self.build_loop()

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
        from fractal.errors import FractalError

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
        from fractal.errors import FractalError

        try:
            snap = self.builder.build()
        except FractalError:  # a locked database, say: the next refresh reads again
            return
        if snap is not self.snapshot:
            self.call_from_thread(self.apply, snap)

    def apply(self, snap: Snapshot) -> None:
        """Show ``snap``: relabel the tree in place, or rebuild it when its members changed."""
        try:
            tree = self.query_one("#tree", Tree)
        except NoMatches:  # the app is closing: its panes are gone
            return
        previous, self.snapshot = self.snapshot, snap
        now = self.clock()
        if snap.gone:
            flows.show_gone(self, tree, snap.gone)
            return
        views = flows.visible(self, snap)
        members = tuple(v.branch for v in views)
        before = {v.branch: v for v in self._views}
        flows.select_first(self, tree, views)
        if members != self._members:
            flows.rebuild_tree(self, tree, views, now)
        else:  # only the lines whose node changed
            for view in views:
                known = before.get(view.branch)
                if known is not view and known != view:
                    self._tree_nodes[view.branch].set_label(render.node_label(view, now))
        self._views = views
        flows.update_panes(self, previous, snap)  # the inbox, the radio, the node pane
        self.applied += 1
        if self.painted is None:
            self.painted = time.monotonic()

    def _relabel_running(self) -> None:
        if self.snapshot is None:
            return
        now = self.clock()
        for view in self.snapshot.nodes:
            node = self._tree_nodes.get(view.branch)
            if view.live.step_started is not None and node is not None:
                label = render.node_label(view, now)
                if label.plain != str(node.label):  # the clock moved: redraw that line
                    node.set_label(label)

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
        from fractal.store.dashboard import history

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
        from fractal.errors import FractalError

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
        outcome = verbs.call_verb(self, label, verb)
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
        from fractal.domain.signals import Signal
        from fractal.lifecycle.steer import send

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
        from fractal.lifecycle.resume import resume

        view = self._target()
        if view is not None:
            self.run_verb("resume", lambda: resume(self.verb_context(), view.branch))

    def action_kill(self) -> None:
        from fractal.lifecycle.kill import kill

        view = self._target()
        if view is not None:
            self.confirm_verb(f"kill {view.branch} and its subtree now (loop, agent, pane)?",
                            "kill", lambda: kill(self.verb_context(), view.branch))

    def action_approve(self) -> None:
        flows.approve_key(self)

    def prepare(self, label: str, step: Callable[[], object]) -> None:
        """Run a key's preparation (reading a gate, a diffstat) as a verb is run; notify
        only when it failed (call from a worker thread)."""
        outcome = verbs.call_verb(self, label, step)
        if outcome.failed:
            self.outcomes.append(outcome.text)
            self.call_from_thread(self.notify, outcome.text, severity="error")

    def action_merge(self) -> None:
        flows.merge_key(self)

    def action_send(self) -> None:
        flows.send_key(self)

    def action_open_pane(self) -> None:
        flows.open_pane_key(self)

    def action_search(self) -> None:
        flows.guard_key(self, "search", lambda: flows.search_key(self))

    def action_filter(self) -> None:
        flows.guard_key(self, "filter", lambda: flows.filter_key(self, FILTERS))

    def action_toggle_retired(self) -> None:
        flows.guard_key(self, "retired", lambda: flows.retired_key(self))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def verb_context(self) -> Context:
        """The context the dashboard's verbs act in: its tree, from the repository's main
        checkout, in whatever loop this process runs (the operator's, outside any)."""
        from fractal.lifecycle.context import open_context

        return open_context(self.fractal.repo)


def run_dashboard(tree: FractalTree, select: str | None = None) -> None:
    """Run the dashboard in this terminal until the user quits."""
    app = Dashboard(tree)
    app.selected = select
    app.run()

