"""The radio's rules: channels, who may read and write them, where a message and a reply
go, and the text of the loop's notices. Pure: no I/O, no clock.

Every node owns four channels. ``public``: every node of the tree reads and writes it.
``private``: only its owner reads or writes it (notes to itself). ``inbox``: every node
writes to it, only the owner reads it. ``outbox``: only the owner writes to it, every node
reads it (the loop posts the node's notices there, so its ancestors' feed shows them).
A message id is 8 lowercase hex characters.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from fractal.domain.errors import InvalidValue

__all__ = ["CHANNELS", "DEFAULT_PRIORITY", "MAX_BODY_BYTES", "MAX_PRIORITY",
           "NOTICE_PRIORITY", "Access", "Channel", "Route", "can_read", "can_write",
           "check_body", "check_message_id", "check_priority", "feed_hosts", "gate_notice",
           "is_descendant", "merge_notice", "money", "parse_channel", "reply_route",
           "reply_subject", "route_post", "route_send", "run_end_notice"]

MAX_PRIORITY = 10
"""Priorities run 0 (lowest) to 10 (most urgent)."""
DEFAULT_PRIORITY = 5
"""A post without ``--priority``."""
NOTICE_PRIORITY = 7
"""Every notice the loop posts (a run's end, a gate waiting, a merge, a hand-back)."""

_MESSAGE_ID = re.compile(r"[0-9a-f]{8}")


class Channel(enum.Enum):
    """A node's channels (see the module docstring for their permissions)."""

    PUBLIC = "public"
    PRIVATE = "private"
    INBOX = "inbox"
    OUTBOX = "outbox"


CHANNELS: tuple[str, ...] = tuple(c.value for c in Channel)
"""Every channel name, in the order listings and errors show them."""


class Access(enum.Enum):
    """Whether a reader or writer must be the channel's owner."""

    ANYONE = "anyone"
    OWNER = "owner"


_READ: dict[Channel, Access] = {Channel.PUBLIC: Access.ANYONE, Channel.PRIVATE: Access.OWNER,
                                Channel.INBOX: Access.OWNER, Channel.OUTBOX: Access.ANYONE}
_WRITE: dict[Channel, Access] = {Channel.PUBLIC: Access.ANYONE, Channel.PRIVATE: Access.OWNER,
                                 Channel.INBOX: Access.ANYONE, Channel.OUTBOX: Access.OWNER}


def parse_channel(name: str) -> Channel:
    """The Channel called ``name``; raise InvalidValue naming the known ones otherwise."""
    try:
        return Channel(name.strip())
    except ValueError:
        raise InvalidValue(f"unknown channel {name!r}: a node's channels are "
                           f"{', '.join(CHANNELS)}") from None


def can_read(actor: str, host: str, channel: Channel, *, root: str | None = None) -> bool:
    """True when node ``actor`` may read ``channel`` of node ``host``: anyone reads a
    public channel, the owner reads its own, and the operator (``actor`` is the tree's
    ``root``) reads every channel of every node."""
    return _READ[channel] is Access.ANYONE or actor == host or (root is not None
                                                                and actor == root)


def can_write(actor: str, host: str, channel: Channel) -> bool:
    """True when node ``actor`` may post to ``channel`` of node ``host``."""
    return _WRITE[channel] is Access.ANYONE or actor == host


def _refuse_write(actor: str, host: str, channel: Channel) -> None:
    if not can_write(actor, host, channel):
        raise InvalidValue(f"{actor} cannot post to the {channel.value} of {host}: only its "
                           f"owner writes there; send to its inbox or public channel instead")


MAX_BODY_BYTES = 64 * 1024
"""The largest message body the radio takes, in bytes of UTF-8 (64 KiB)."""


def check_body(data: str, *, whole: bool = True) -> str:
    """``data`` when its UTF-8 form is at most MAX_BODY_BYTES; raise InvalidValue
    otherwise, saying the size and the cap. ``whole`` False: ``data`` is only the start
    of the body (its reading stopped past the cap), so the refusal says "more than" the
    cap instead of a size."""
    size = len(data.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        said = f"{size} bytes" if whole else f"more than {MAX_BODY_BYTES} bytes"
        raise InvalidValue(f"the message body is {said}, over the radio's cap of "
                           f"{MAX_BODY_BYTES} (64 KiB): commit a large payload to a file in "
                           "your worktree and send its path")
    return data


def check_priority(priority: int) -> int:
    """``priority`` when it lies in 0-10; raise InvalidValue otherwise."""
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidValue(f"priority {priority} is out of range: give 0 (lowest) to "
                           f"{MAX_PRIORITY} (most urgent)")
    return priority


def check_message_id(text: str) -> str:
    """The 8-hex message id ``text`` (lower-cased); raise InvalidValue for anything else."""
    clean = text.strip().lower()
    if not _MESSAGE_ID.fullmatch(clean):
        raise InvalidValue(f"{text!r} is not a message id: ids are 8 hex characters, as "
                           "`fractal radio messages` lists them")
    return clean


@dataclass(frozen=True)
class Route:
    """Where a message goes: ``host`` node's ``channel``."""

    host: str
    channel: Channel


def route_send(actor: str, *, node: str | None, parent: str | None,
               channel: Channel | None) -> Route:
    """Where ``radio send`` delivers: the named ``node``, else the actor's ``parent`` (the
    branch; None at the root), on ``channel`` (default ``inbox``).

    Raises InvalidValue when neither or both targets are given, when ``parent`` was asked
    for at the root (``parent`` None with no node), or when the actor may not write there.
    """
    if node is None and parent is None:
        raise InvalidValue("say where the message goes: --node NODE or --parent")
    if node is not None and parent is not None:
        raise InvalidValue("give --node or --parent, not both")
    host = node if node is not None else parent
    assert host is not None
    route = Route(host, channel or Channel.INBOX)
    _refuse_write(actor, route.host, route.channel)
    return route


def route_post(actor: str, *, node: str | None, channel: Channel | None) -> Route:
    """Where ``radio post`` publishes: the actor's own ``outbox`` by default, another
    ``node``'s ``public`` channel when one is named; ``channel`` overrides either.
    Raises InvalidValue when the actor may not write there."""
    host = node or actor
    default = Channel.OUTBOX if host == actor else Channel.PUBLIC
    route = Route(host, channel or default)
    _refuse_write(actor, route.host, route.channel)
    return route


def reply_route(actor: str, *, host: str, channel: Channel, sender: str) -> Route:
    """Where a reply by ``actor`` to a message (``sender`` posted it to ``host``'s
    ``channel``) goes. A reply on a ``public`` or ``private`` channel stays in that
    channel (a thread in place); otherwise it goes to the other party's inbox: the
    sender's, or, when the actor sent the message itself, the host's (the recipient)."""
    if channel in (Channel.PUBLIC, Channel.PRIVATE):
        return Route(host, channel)
    return Route(host if sender == actor else sender, Channel.INBOX)


def reply_subject(subject: str) -> str:
    """``Re: <subject>``, never ``Re: Re: ...``."""
    return subject if subject.lower().startswith("re: ") else f"Re: {subject}"


def is_descendant(branch: str, ancestor: str, root: str) -> bool:
    """True when ``branch`` lies strictly below ``ancestor`` in the dotted lineage (every
    other node lies below the tree's ``root``)."""
    if branch == ancestor:
        return False
    return ancestor == root or branch.startswith(ancestor + ".")


def feed_hosts(node: str, known: Iterable[str], root: str) -> list[str]:
    """The nodes whose ``public`` and ``outbox`` posts make up ``node``'s feed: every one
    of ``known`` strictly below it (the whole tree for the root), sorted."""
    return sorted(b for b in set(known) if is_descendant(b, node, root))


def money(usd: float | None) -> str:
    """``$1.2345``, or ``unknown`` for a cost nobody recorded."""
    return "unknown" if usd is None else f"${usd:.4f}"


def run_end_notice(status: str, reason: str, *, run_id: int, spend: float | None,
                   unpriced: int = 0, figures: str = "") -> tuple[str, str]:
    """``(subject, body)`` of the notice a run's end posts: subject ``run <status>:
    <reason>``; the body repeats the reason, names the run and its spend (USD, the run's
    subtree; ``unknown`` when no step recorded a cost, with the unpriced steps counted),
    and appends a capped run's ``figures``."""
    lines = [reason, f"run {run_id} spent {money(spend)}"
             + (f" ({unpriced} step(s) without a recorded cost)" if unpriced else "")]
    if figures:
        lines.append(figures)
    return f"run {status}: {reason}", "\n".join(lines)


def gate_notice(step_name: str, branch: str, step_id: int, diffstat: str) -> tuple[str, str]:
    """``(subject, body)`` of the notice a gate posts when it starts waiting: the approve
    command in the subject, the node's changes (a diffstat) in the body."""
    command = f"fractal node approve {branch} {step_id}"
    body = f"{command}\n\n{diffstat.rstrip() or '(no changes against the fork point)'}"
    return f"{step_name} awaits approval: {command}", body


def merge_notice(kind: str, child: str, into: str, sha: str | None,
                 detail: str = "") -> tuple[str, str]:
    """``(subject, body)`` of a merge notice; ``detail`` (a diffstat, a summary, a reason)
    is the body. By ``kind``: ``merged``, ``<child> merged into <into> (<short sha>)``;
    ``handed back``, ``<into> handed a conflict back to <child> (<short sha>)`` (``sha``
    the tip of ``into`` the child received); ``refused``, ``<child> not merged into
    <into>: refused``. Raises ValueError for another ``kind``."""
    short = f" ({sha[:10]})" if sha else ""
    if kind == "merged":
        return f"{child} merged into {into}{short}", detail.strip()
    if kind == "handed back":
        return f"{into} handed a conflict back to {child}{short}", detail.strip()
    if kind == "refused":
        return f"{child} not merged into {into}: refused", detail.strip()
    raise ValueError(f"unknown merge notice kind {kind!r}: merged, handed back or refused")
