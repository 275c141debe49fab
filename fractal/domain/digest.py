"""The digest a SYNC prompt carries: what changed around the node since its last SYNC, so
the agent acts without having to look first. Pure wording; the loop gathers the facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fractal.domain.states import Status
from fractal.domain.waits import WaitingChild

__all__ = ["NEWEST", "Digest", "render_digest"]

NEWEST = 3
"""How many of the newest unread subjects the digest names."""


@dataclass(frozen=True)
class Digest:
    """``notices``: (child's last name segment, subject) of the children's outbox notices
    since the last SYNC, oldest first; ``gates``: (child, step name, step id) awaiting
    approval; ``unread``: how many inbox messages are unread, ``subjects``: the newest ones
    (newest first); ``waiting``: the children a children wait holds for."""

    notices: Sequence[tuple[str, str]] = ()
    gates: Sequence[tuple[str, str, int]] = ()
    unread: int = 0
    subjects: Sequence[str] = ()
    waiting: Sequence[WaitingChild] | None = None
    """While the node waits for its children: every child the wait holds for (None: it
    does not wait)."""


def render_digest(d: Digest) -> str:
    """The digest as a Markdown section (``### Since the last SYNC``); every line says one
    fact and, where the agent can act on it, the exact command (with ``$FRACTAL_BIN``,
    which the prompt's rendering turns into the run's ``fractal`` path)."""
    lines = ["### Since the last SYNC", ""]
    if d.waiting is not None:
        lines += _waiting_lines(d.waiting)
    if d.notices:
        lines.append(f"- Child notices ({len(d.notices)}, from `$FRACTAL_BIN radio feed`):")
        lines += [f"  - {child}: {subject}" for child, subject in d.notices]
    else:
        lines.append("- Child notices: none.")
    if d.gates:
        lines.append(f"- Gates pending ({len(d.gates)}):")
        lines += [f"  - {child} {step} (step {step_id}): review `$FRACTAL_BIN node diff {child}`, "
                  f"then `$FRACTAL_BIN node approve {child}`" for child, step, step_id in d.gates]
    else:
        lines.append("- Gates pending: none.")
    if d.unread:
        newest = "; ".join(f'"{s}"' for s in d.subjects[:NEWEST])
        lines.append(f"- Unread messages: {d.unread} (newest: {newest}); read them with "
                     "`$FRACTAL_BIN radio messages`.")
    else:
        lines.append("- Unread messages: none.")
    return "\n".join(lines) + "\n"


def _waiting_lines(children: Sequence[WaitingChild]) -> list[str]:
    """What the node's children wait holds for: each child with its state and, where
    only the agent can move it, the command that does."""
    if not children:
        return ["- Waiting for children: none is live any more; the wait ends at its next look."]
    lines = [f"- Waiting for {len(children)} "
             f"{'child' if len(children) == 1 else 'children'} (the step runs once each "
             "has settled):"]
    for child in sorted(children, key=lambda c: c.branch):
        name = child.branch.rsplit(".", 1)[-1]
        if child.gate_pending:
            hint = (f": review `$FRACTAL_BIN node diff {name}`, then "
                    f"`$FRACTAL_BIN node approve {name}`")
        elif child.never_started and child.status is Status.IDLE:
            hint = f": nothing starts it but you, `$FRACTAL_BIN node start {name}`"
        elif child.handed_back:
            hint = ": its loop resolves the conflict, then merge it again"
        elif child.status is Status.PAUSED:
            hint = f": `$FRACTAL_BIN node resume {name}` when it should go on"
        else:
            hint = ""
        lines.append(f"  - {name}: {child.state}{hint}")
    return lines
