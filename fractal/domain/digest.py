"""The digest a SYNC prompt carries: what changed around the node since its last SYNC, so
the agent acts without having to look first; and the rule that decides whether a waiting
loop has anything new to SYNC about (``news``). Pure wording and rules; the loop gathers
the facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fractal.domain.states import SETTLED, Status

__all__ = ["NEWEST", "Digest", "DigestKey", "news", "render_digest"]

NEWEST = 3
"""How many of the newest unread subjects the digest names."""


@dataclass(frozen=True)
class Digest:
    """``notices``: (child's last name segment, subject) of the children's outbox notices
    since the last SYNC, oldest first; ``gates``: (child, step name, step id) awaiting
    approval; ``unread``: how many inbox messages are unread, ``subjects``: the newest ones
    (newest first)."""

    notices: Sequence[tuple[str, str]] = ()
    gates: Sequence[tuple[str, str, int]] = ()
    unread: int = 0
    subjects: Sequence[str] = ()
    #: (child's last name segment, its status) of each child holding a conflict the
    #: node handed back to it and has not merged again since.
    hand_backs: Sequence[tuple[str, str]] = ()


_SETTLED_CHILD: frozenset[str] = frozenset({*SETTLED, Status.RETIRED})
"""Child statuses whose run is over (a ``news`` fact when a child reaches one)."""


class DigestKey(NamedTuple):
    """What a waiting loop compares between two looks at the tree: ``children`` (branch,
    status) of the direct children, ``gates`` the step ids of their gates awaiting
    approval, ``newest_notice`` the highest message id on their outboxes (0: none),
    ``unread`` the ids of the node's unread inbox messages, ``handed_to_me`` whether a
    hand-back note sits in the node's own directory."""

    children: tuple[tuple[str, str], ...] = ()
    gates: frozenset[int] = frozenset()
    newest_notice: int = 0
    unread: frozenset[int] = frozenset()
    handed_to_me: bool = False


def news(seen: DigestKey | None, now: DigestKey) -> bool:
    """Whether ``now`` holds something the agent has not been shown at the SYNC that saw
    ``seen`` (None: no SYNC of this run yet, so everything is news).

    News is only what arrived: a child that settled (its status is now one of a finished
    run and was not, or it is new and already finished), a gate that opened, an outbox notice of a child, an unread message,
    a hand-back into the node. What went away (a gate approved, a message read, a child
    retired after it had settled) and what the node did itself (a child spawned) is not:
    a SYNC would only find its own doing."""
    if seen is None:
        return True
    before = dict(seen.children)
    settled = any(status in _SETTLED_CHILD and before.get(child) not in _SETTLED_CHILD
                  for child, status in now.children)
    return (settled or bool(now.gates - seen.gates) or now.newest_notice > seen.newest_notice
            or bool(now.unread - seen.unread) or (now.handed_to_me and not seen.handed_to_me))


def render_digest(d: Digest) -> str:
    """The digest as a Markdown section (``### Since the last SYNC``); every line says one
    fact and, where the agent can act on it, the exact command (with ``$FRACTAL_BIN``,
    which the prompt's rendering turns into the run's ``fractal`` path)."""
    lines = ["### Since the last SYNC", ""]
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
