"""The digest a SYNC prompt carries: what changed around the node since its last SYNC, so
the agent acts without having to look first. Pure wording; the loop gathers the facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NEWEST", "Digest", "render_digest"]

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
    if d.unread:
        newest = "; ".join(f'"{s}"' for s in d.subjects[:NEWEST])
        lines.append(f"- Unread messages: {d.unread} (newest: {newest}); read them with "
                     "`$FRACTAL_BIN radio messages`.")
    else:
        lines.append("- Unread messages: none.")
    return "\n".join(lines) + "\n"
