"""The digest a SYNC prompt carries: what changed around the node since its last SYNC, so
the agent acts without having to look first; and the rule that decides whether a waiting
loop has anything new to SYNC about (``news``). Pure wording and rules; the loop gathers
the facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fractal.domain.states import SETTLED, Status
from fractal.domain.waits import WaitingChild

__all__ = ["NEWEST", "Digest", "DigestKey", "news", "render_digest"]

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
    #: (child's last name segment, its status) of each child holding a conflict the
    #: node handed back to it and has not merged again since.
    hand_backs: Sequence[tuple[str, str]] = ()
    waiting: Sequence[WaitingChild] | None = None
    """While the node waits for its children: every child the wait holds for (None: it
    does not wait)."""


_SETTLED_CHILD: frozenset[str] = frozenset({*SETTLED, Status.RETIRED})
"""Child statuses whose run is over (a ``news`` fact when a child reaches one)."""


class DigestKey(NamedTuple):
    """What a waiting loop compares between two looks at the tree: ``children`` (branch,
    status) of the direct children, ``gates`` the step ids of their gates awaiting
    approval, ``newest_notice`` the highest message id on their outboxes (0: none),
    ``unread`` the ids of the node's unread inbox messages, ``handed_to_me`` whether a
    hand-back note sits in the node's own directory, ``stuck`` the children a children
    wait holds for that are idle and never started (empty when the node does not wait:
    only a wait's SYNC names them)."""

    children: tuple[tuple[str, str], ...] = ()
    gates: frozenset[int] = frozenset()
    newest_notice: int = 0
    unread: frozenset[int] = frozenset()
    handed_to_me: bool = False
    stuck: frozenset[str] = frozenset()


def news(seen: DigestKey | None, now: DigestKey) -> bool:
    """Whether ``now`` holds something the agent has not been shown at the SYNC that saw
    ``seen`` (None: no SYNC of this run yet, so everything is news).

    News is only what arrived: a child that settled (its status is now one of a finished
    run and was not, or it is new and already finished), a gate that opened, an outbox
    notice of a child, an unread message, a hand-back into the node, a child the wait
    holds for that nothing but the agent will start (idle, never started), first seen
    while waiting. What went away (a gate approved, a message read, a child retired after
    it had settled) and what the node did itself (a child spawned) is not: a SYNC would
    only find its own doing."""
    if seen is None:
        return True
    before = dict(seen.children)
    settled = any(status in _SETTLED_CHILD and before.get(child) not in _SETTLED_CHILD
                  for child, status in now.children)
    return (settled or bool(now.gates - seen.gates) or now.newest_notice > seen.newest_notice
            or bool(now.unread - seen.unread) or (now.handed_to_me and not seen.handed_to_me)
            or bool(now.stuck - seen.stuck))


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
    if d.hand_backs:
        lines.append(f"- Handed back, not merged again ({len(d.hand_backs)}):")
        lines += [f"  - {child} ({status}): once it settled, merge it again with "
                  f"`$FRACTAL_BIN node merge {child}`" for child, status in d.hand_backs]
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
