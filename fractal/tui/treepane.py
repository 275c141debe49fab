"""The dashboard's tree pane: a Textual ``Tree`` that shows a snapshot's nodes, each under
its nearest shown ancestor, and keeps the cursor on the selected branch.

The pane owns what it drew (the row of each branch, the branches in order, the views the
rows were labelled from); the dashboard hands it the nodes to show and the selection and
reads back the members and the selection the pane ended on. Labels are
``render.node_label`` lines; a row is relabelled in place when only its node changed, and
the whole pane is rebuilt only when the set of shown nodes changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from fractal.tui import render
from fractal.tui.snapshot import NodeView

__all__ = ["NodeTree"]


class NodeTree(Tree[str]):
    """The tree pane: each row's data is its node's branch (the root row's is None)."""

    def __init__(self, root_label: str, *, id: str | None = None) -> None:
        super().__init__(root_label, id=id)
        self._rows: dict[str, TreeNode[str]] = {}
        self._members: tuple[str, ...] = ()
        self._views: list[NodeView] = []

    @property
    def members(self) -> tuple[str, ...]:
        """The branches shown, in row order (parents before children)."""
        return self._members

    def label_of(self, branch: str) -> str:
        """The text of ``branch``'s row. Raises KeyError when it is not shown."""
        return str(self._rows[branch].label)

    def show(self, views: list[NodeView], now: float, selected: str | None, *,
             newly_selected: bool = False) -> str | None:
        """Show ``views`` (sorted by branch) at ``now`` (epoch seconds) with ``selected``
        chosen; return the selection the pane ends on.

        The same members as drawn: only the rows whose node changed are relabelled, and a
        ``newly_selected`` branch gets the cursor now. Other members: the pane is rebuilt
        and the cursor put back on ``selected`` wherever its row moved; a selected node no
        longer shown gives the selection to the row under the cursor (None for none).
        """
        members = tuple(v.branch for v in views)
        if members != self._members:
            selected = self._rebuild(views, now, selected)
        else:
            before = {v.branch: v for v in self._views}
            for view in views:
                known = before.get(view.branch)
                if known is not view and known != view:
                    self._rows[view.branch].set_label(render.node_label(view, now))
            if newly_selected and selected in self._rows:
                self.move_cursor(self._rows[selected])
        self._views = views
        return selected

    def relabel_running(self, views: Iterable[NodeView], now: float) -> None:
        """Redraw the rows of the nodes among ``views`` that run a step whose elapsed
        time, as ``now`` shows it, changed the line (no read: the clock moved)."""
        for view in views:
            row = self._rows.get(view.branch)
            if view.live.step_started is not None and row is not None:
                label = render.node_label(view, now)
                if label.plain != str(row.label):
                    row.set_label(label)

    def forget(self, root_label: str) -> bool:
        """Empty the pane under a root labelled ``root_label`` (the tree is gone); True
        when it held rows until now."""
        had = bool(self._members)
        if had:
            self.clear()
            self._rows, self._members, self._views = {}, (), []
        self.root.set_label(root_label)
        return had

    def find_after(self, text: str, after: str | None) -> str | None:
        """The first shown branch holding ``text`` that sorts after ``after`` (wrapping
        round to the first one holding it), or None when none does."""
        names = [b for b in self._members if text in b]
        later = [b for b in names if after is None or b > after]
        picks = later or names
        return picks[0] if picks else None

    def move_to(self, branch: str) -> None:
        """Put the cursor on ``branch``'s row. Raises KeyError when it is not shown."""
        self.move_cursor(self._rows[branch])

    def _rebuild(self, views: list[NodeView], now: float, selected: str | None) -> str | None:
        self.clear()
        self._rows = {}
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
            parent: TreeNode[str] = self.root if up is None else self._rows[up]
            label = render.node_label(view, now)
            row = parent.add(label, data=view.branch, expand=True) \
                if view.branch in parents else parent.add_leaf(label, data=view.branch)
            self._rows[view.branch] = row
        self._members = tuple(v.branch for v in views)
        # The new rows have no line numbers until the tree lays them out, and the layout
        # puts the cursor back on the old cursor's row index (another node now): lay out
        # first, then move the cursor to the selected branch. A highlight message the
        # layout posted is stale by then and ignored
        # (``Dashboard.on_tree_node_highlighted``).
        _ = self.last_line
        if selected in self._rows:
            self.move_cursor(self._rows[selected])
        elif selected is not None:  # the selected node is gone or filtered out
            cursor = self.cursor_node
            selected = cursor.data if cursor is not None else None
        return selected
