"""What ``fractal node merge`` leaves besides its result: its radio notices, and the record
of a refusal met by a node's own merge.

A node's agent merges its settled children from inside one of its own steps, where only
the step's pane shows what the command printed, and the step goes on (a refused merge is
something the agent was told, not a failed step). So when a node's merge of its child
into itself is refused, the refusal is also recorded where an operator looks later,
besides the ``failed`` ``merge`` event on the child that every refusal gets:

* a ``failed`` ``merges`` row, reason ``refused: <why>``: the inbox's ``merge`` item once
  the child has settled (``merge into <target> did not land: refused: ...``), until a
  later merge of the child lands;
* a ``failed`` ``merge`` event on the merging node, ``refused: merge of <child>: <why>``:
  its ``fractal node activity``;
* a notice on the child's outbox, ``<child> not merged into <target>: refused`` with the
  reason as its body: every ancestor's ``fractal radio feed``.

An operator's refusal is only printed (and recorded on the child): the operator reads it
at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fractal.domain.run.reasons import clip_reason
from fractal.errors import FractalError
from fractal.workspace import git

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context

__all__ = ["notify", "record_refusal"]


def notify(notices: list[str], post: Callable[[], str]) -> None:
    """Post a merge or hand-back notice to the child's outbox; a notice that cannot be
    posted is reported in ``notices``, never fatal (the merge itself is recorded)."""
    try:
        post()
    except FractalError as exc:
        notices.append(f"could not post the radio notice: {exc}")


def _sha(ctx: Context, branch: str) -> str:
    """The commit ``branch`` points at, or ``""`` when it names none."""
    try:
        return git.head_sha(ctx.tree.repo, branch)
    except FractalError:
        return ""


def record_refusal(ctx: Context, child: str, target: str, why: str) -> None:
    """Record the refusal ``why`` of the acting node's merge of ``child`` into ``target``
    (itself) where an operator looks (see the module docstring). Raises StoreError when
    the row or the event cannot be written; a notice that cannot be posted is left out
    (the row and the event hold the refusal)."""
    from fractal.lifecycle.radio import notify_refused  # deferred: start-up cost (33 modules)
    from fractal.store.merges import MergeBook  # deferred: start-up cost (28 modules)

    MergeBook(ctx.tree.db_path).book_merge(
        child=child, target=target, child_sha=_sha(ctx, child), target_sha=_sha(ctx, target),
        squash_sha=None, files=None, actor=ctx.actor, status="failed",
        reason=clip_reason(f"refused: {why}"))
    ctx.ledger.add_event(target, "merge", actor=ctx.actor, status="failed",
                         metadata=clip_reason(f"refused: merge of {child}: {why}"))
    notify([], lambda: notify_refused(ctx.tree, child, target, why))
