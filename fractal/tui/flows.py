"""The dashboard's two keys that talk back: merge the selected node into its target (the
``fractal node merge`` path, confirmed after its diffstat) and send it a message (the
``fractal radio send`` path, from a one-line prompt). Each runs the verb in the app's
verb worker, so its result or refusal shows as a notification like every other key.
Also the screen of a tree destroyed under the dashboard, the tree pane's rebuild, the
pane (``o``), search (``/``), filter (``x``) and retired (``t``) keys, and the guard that
keeps a fault in a key from ending the dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fractal.tui.screens import PromptScreen

if TYPE_CHECKING:
    from collections.abc import Callable

    from textual.widgets import Tree
    from textual.widgets.tree import TreeNode

    from fractal.lifecycle.merge import MergeResult
    from fractal.tree import Tree as FractalTree
    from fractal.tui.app import Dashboard
    from fractal.tui.snapshot import NodeView, Snapshot

    PaneSwitch = Callable[[FractalTree, str], bool]  # True: this tmux client switched
    PaneAttach = Callable[[FractalTree, str], object]  # attach in this terminal until detach

__all__ = ["filter_key", "guard_key", "merge_key", "merge_line", "open_pane_key",
           "rebuild_tree", "retired_key", "search_key", "select_first", "send_key",
           "show_gone", "start_merge", "update_panes", "visible"]


def visible(app: Dashboard, snap: Snapshot) -> list[NodeView]:
    """The nodes the tree pane shows under the app's filter (retired ones only when
    shown; ``attention``: those with an inbox item; ``active``: active ones)."""
    waiting = {e.item.node for e in snap.inbox}
    out = []
    for view in snap.nodes:
        if view.status == "retired" and not app.show_retired:
            continue
        if app.filter == "attention" and view.branch not in waiting:
            continue
        if app.filter == "active" and view.status != "active":
            continue
        out.append(view)
    return out


def update_panes(app: Dashboard, previous: Snapshot | None, snap: Snapshot) -> None:
    """Redraw the inbox and radio panes when their lines changed, and reload the node
    pane when the selected node's line changed, it is active (its clocks, its
    transcript) or the pane shows another node: an unchanged pane is not re-rendered."""
    from fractal.tui import render

    fresh = previous is None or previous.gone
    if fresh or previous is None or previous.inbox != snap.inbox:
        app._put("#inbox", render.inbox(snap))  # a stall's quiet time moves, its line not
    if fresh or previous is None or previous.feed != snap.feed:
        app._put("#feed", render.feed(snap))
    chosen = snap.node(app.selected) if app.selected else None
    if chosen is None:  # nothing (or a node now gone) selected: clear the pane once
        if fresh or app.shown is not None:
            app.show_node()
    elif fresh or previous is None or chosen.status == "active" \
            or app.shown is None or app.shown.branch != chosen.branch \
            or previous.node(chosen.branch) != chosen:
        app.show_node()


def approve_key(app: Dashboard) -> None:
    """``a``: show the selected node's gate and its diffstat (read off the UI thread),
    then approve on ``y``."""
    view = app._target()
    if view is not None:
        branch = view.branch
        app.run_worker(lambda: app.prepare("approve", lambda: start_approve(app, branch)),
                       thread=True, group="verb")


def merge_key(app: Dashboard) -> None:
    """``m``: merge the selected node (the diffstat is read off the UI thread)."""
    view = app._target()
    if view is not None:
        branch = view.branch
        app.run_worker(lambda: app.prepare("merge", lambda: start_merge(app, branch)),
                       thread=True, group="verb")


def send_key(app: Dashboard) -> None:
    """``n``: send the selected node a message."""
    view = app._target()
    if view is not None:
        send_prompt(app, view.branch)


def show_gone(app: Dashboard, tree: Tree[str], why: str) -> None:
    """The tree was destroyed under the dashboard: empty panes, and why (notified once)."""
    from textual.widgets import Static

    if app._members or app.painted is None:
        tree.clear()
        app._tree_nodes, app._members, app._views = {}, (), []
        app.notify(why, severity="error", timeout=30)
    tree.root.set_label(f"{app.fractal.root} (gone)")
    app.query_one("#inbox", Static).update(why)
    app.query_one("#feed", Static).update("")
    app._show(None, None, None)
    if app.painted is None:
        import time

        app.painted = time.monotonic()


def merge_line(result: MergeResult) -> str:
    """The merge's outcome as one notification line (the CLI's stderr wording)."""
    if result.status == "merged" and result.squash_sha:
        line = (f"merged {result.child} into {result.target}: {result.squash_sha[:10]} "
                f"({result.files} file(s))")
    elif result.status == "handed-back":
        state = "re-armed to resolve them" if result.rearmed else "not re-armed"
        line = (f"handed the conflict back to {result.child} ({state}); conflicting "
                f"file(s): {', '.join(result.conflicts)}")
    else:  # nothing new: its first notice already says so
        return "; ".join(result.notices) or (f"nothing new to merge: {result.target} "
                                             f"already holds all of {result.child}'s work")
    return "; ".join([line, *result.notices])


def start_approve(app: Dashboard, branch: str) -> None:
    """Show the newest gate of ``branch`` awaiting approval and its diffstat, then approve
    it on ``y``, as ``fractal node approve BRANCH`` (call from a worker thread)."""
    from fractal.lifecycle.approve import approve
    from fractal.lifecycle.inbox import gate_diffstat

    gates = [e.item for e in (app.snapshot.inbox if app.snapshot else ())
             if e.item.node == branch and e.item.kind.value == "gate"]
    if not gates:
        app.call_from_thread(app.notify, f"{branch} has no step awaiting approval",
                              severity="warning")
        return
    gate = gates[-1]
    step_id = int(str(gate.details.get("step_id")))
    stat = gate_diffstat(app.fractal, branch) or "diffstat unknown"
    question = f"approve {branch}: {gate.summary}\n{stat}"
    app.call_from_thread(app.confirm_verb, question, "approve",
                          lambda: approve(app.verb_context(), branch, step_id))


def start_merge(app: Dashboard, branch: str) -> None:
    """Show what merging ``branch`` brings (its diffstat against its parent), then merge
    on ``y``, as ``fractal node merge BRANCH`` (call from a worker thread)."""
    from fractal.lifecycle.inbox import gate_diffstat
    from fractal.lifecycle.merge import merge_then_clean

    stat = gate_diffstat(app.fractal, branch) or "diffstat unknown"
    question = f"merge {branch} into its target (squash)?\n{stat}"

    def verb() -> str:
        return merge_line(merge_then_clean(app.verb_context(), branch))

    app.call_from_thread(app.confirm_verb, question, "merge", verb)


def send_prompt(app: Dashboard, branch: str) -> None:
    """Ask for a one-line message and send it to ``branch``'s inbox, as ``fractal radio
    send --node BRANCH`` (its first line is the subject; nothing is sent on escape)."""
    from fractal.lifecycle.radio import send

    def sent(text: str | None) -> None:
        data = (text or "").strip()
        if not data:
            return

        def verb() -> str:
            uuid = send(app.verb_context(), data, node=branch, to_parent=False, channel=None,
                        subject=data.splitlines()[0], priority=5)
            return f"sent {uuid} to {branch}'s inbox"

        app.run_verb("send", verb)

    app.push_screen(PromptScreen(f"message to {branch} (enter sends, escape cancels):"), sent)


def select_first(app: Dashboard, tree: Tree[str], views: list[NodeView]) -> None:
    """While nothing is selected (the dashboard just opened, no ``NODE`` given): select
    the first node shown, so the node pane and the keys have one. The cursor moves to it
    now when its row is drawn already, else when the tree is rebuilt."""
    if app.selected is not None or not views:
        return
    app.selected = views[0].branch
    if app._members == tuple(v.branch for v in views):
        tree.move_cursor(app._tree_nodes[app.selected])


def rebuild_tree(app: Dashboard, tree: Tree[str], views: list[NodeView], now: float) -> None:
    """Redraw the tree pane from ``views`` (parents first): each node under its nearest
    shown ancestor, the cursor kept on the selected branch wherever its row moved (a
    selected node no longer shown gives the selection to the row under the cursor)."""
    from fractal.tui import render

    tree.clear()
    app._tree_nodes = {}
    present = {v.branch for v in views}
    above: dict[str, str | None] = {}
    for view in views:
        head, above[view.branch] = view.branch, None
        while "." in head:
            head = head.rpartition(".")[0]
            if head in present:
                above[view.branch] = head
                break
    parents = set(above.values())
    for view in views:  # sorted by branch: parents before children
        up = above[view.branch]
        parent: TreeNode[str] = tree.root if up is None else app._tree_nodes[up]
        label = render.node_label(view, now)
        node = parent.add(label, data=view.branch, expand=True) \
            if view.branch in parents else parent.add_leaf(label, data=view.branch)
        app._tree_nodes[view.branch] = node
    app._members = tuple(v.branch for v in views)
    # The new rows have no line numbers until the tree lays them out, and the layout puts
    # the cursor back on the old cursor's row index (another node now): lay out first,
    # then move the cursor to the selected branch. A highlight message the layout posted
    # is stale by then and ignored (``Dashboard.on_tree_node_highlighted``).
    _ = tree.last_line
    if app.selected in app._tree_nodes:
        tree.move_cursor(app._tree_nodes[app.selected])
    elif app.selected is not None:  # the selected node is gone or filtered out
        cursor = tree.cursor_node
        app.selected = cursor.data if cursor is not None else None


def open_pane_key(app: Dashboard) -> None:
    """``o``: show the node's tmux pane. Inside tmux this terminal's client switches to it
    (the dashboard keeps running in its own pane); otherwise the app suspends, a tmux
    client attaches in this terminal, and the app comes back when it detaches. A node
    without a pane, or a terminal the app cannot hand over, is refused in a notification.
    ``app.panes`` (switch, attach) is the seam to tmux (``lifecycle.panes`` by default)."""
    from textual.app import SuspendNotSupported

    from fractal.errors import FractalError

    view = app._target()
    if view is None:
        return
    switch, attach = app.panes if app.panes is not None else _tmux_panes()
    try:
        if switch(app.fractal, view.branch):
            return
        with app.suspend():
            attach(app.fractal, view.branch)
    except FractalError as exc:
        _refuse(app, f"open: {exc}")
    except SuspendNotSupported:
        _refuse(app, f"open: this terminal cannot be handed to tmux; run `fractal node "
                     f"attach {view.branch}` in another one")
    except Exception as exc:  # fractal's fault: a crash log, and the dashboard stays
        from fractal.tui.verbs import fault

        _refuse(app, fault(app, "open", exc).text)


def _tmux_panes() -> tuple[PaneSwitch, PaneAttach]:
    from fractal.lifecycle.panes import attach_here, switch_to

    return switch_to, attach_here


def _refuse(app: Dashboard, text: str) -> None:
    app.outcomes.append(text)
    app.notify(text, severity="error")


def guard_key(app: Dashboard, label: str, action: Callable[[], object]) -> None:
    """Run a key's ``action`` on the UI thread as the verb keys run theirs: a refusal
    (``FractalError``) is notified as ``LABEL: why``, any other exception is fractal's
    fault, saved to a crash log and notified (``verbs.fault``); the dashboard stays."""
    from fractal.errors import FractalError
    from fractal.tui.verbs import fault

    try:
        action()
    except FractalError as exc:
        _refuse(app, f"{label}: {exc}")
    except Exception as exc:  # fractal's fault: a crash log, and the dashboard stays
        _refuse(app, fault(app, label, exc).text)


def filter_key(app: Dashboard, filters: tuple[str, ...]) -> None:
    """``x``: show the next of ``filters`` (all, attention, active) and redraw."""
    app.filter = filters[(filters.index(app.filter) + 1) % len(filters)]
    app.notify(f"showing: {app.filter}")
    if app.snapshot is not None:
        app.apply(app.snapshot)


def retired_key(app: Dashboard) -> None:
    """``t``: show or hide the retired nodes and redraw."""
    app.show_retired = not app.show_retired
    if app.snapshot is not None:
        app.apply(app.snapshot)


def search_key(app: Dashboard) -> None:
    """``/``: move the cursor to the next node whose branch holds the typed text (the
    answer is handled under ``guard_key`` too)."""
    from textual.widgets import Tree

    def move(text: str) -> None:
        names = [b for b in app._members if text in b]
        after = [b for b in names if app.selected is None or b > app.selected]
        picks = after or names
        if not picks:
            app.notify(f"no node matches {text!r}", severity="warning")
            return
        app.query_one("#tree", Tree).move_cursor(app._tree_nodes[picks[0]])

    def found(text: str | None) -> None:
        if text:
            guard_key(app, "search", lambda: move(text))
    app.push_screen(PromptScreen("search nodes:"), found)
