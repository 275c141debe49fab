"""The dashboard's modal screens: a yes/no confirmation, a one-line prompt, the help."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

HELP = """\
fractal open — keys

  up/down enter  move in the tree; enter folds or unfolds a subtree
  a              approve the selected node's gate (its diffstat first)
  p / r          pause / resume the selected node and its subtree
  s / f          stop after the current step / finish after the
                 iteration (both confirmed)
  k              kill the node and its subtree (confirmed)
  m              merge the node into its target (diffstat, confirmed)
  n              send the node a message (its inbox; the first line
                 is the subject)
  o              open the node's tmux pane (switch-client inside tmux;
                 back on detach)
  /              search: jump to the next node whose name has the text
  x              filter: all nodes / what waits for you / active ones
  t              show or hide retired nodes
  ?              this help        q   quit

Every key calls the same function as its CLI verb (fractal node
approve, pause, merge, fractal radio send, ...).
"""

DIALOG_WIDTH = 80
"""Columns of a modal dialog, its border and padding included."""

HELP_WIDTH = DIALOG_WIDTH - 2 - 4
"""Columns a dialog's text has inside its border (1 each side) and padding (2 each side):
every line of ``HELP`` fits, so none wraps mid-phrase."""

_CSS = f"""
ConfirmScreen, PromptScreen, HelpScreen {{ align: center middle; }}
#dialog {{ width: {DIALOG_WIDTH}; height: auto; border: thick $accent; background: $surface;
          padding: 1 2; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """Ask ``question``; dismiss with True on ``y`` or enter, False on ``n`` or escape."""

    DEFAULT_CSS = _CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "cancel")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question)
            yield Static("[b]y[/b]/[b]enter[/b] yes   [b]n[/b]/[b]escape[/b] no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class PromptScreen(ModalScreen[str]):
    """A one-line input; dismiss with its text on enter, '' on escape."""

    DEFAULT_CSS = _CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.label)
            yield Input(id="prompt")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss("")


class HelpScreen(ModalScreen[None]):
    """The key list; any of escape, q or ? closes it."""

    DEFAULT_CSS = _CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "close", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(HELP)

    def action_close(self) -> None:
        self.dismiss(None)
