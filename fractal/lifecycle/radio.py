"""``fractal radio``: nodes message each other on their channels (see ``docs/radio.md``).

The actor of every verb is the caller's node: inside a node's loop it is that node
whatever ``--path`` says (an agent cannot pose as another node), otherwise the node whose
worktree holds the working directory (the root, the operator, outside any). The channel
rules are ``domain.radio``'s; a refusal raises InvalidValue (or NodeNotFound) saying why
and what to do. Also the posting functions of the two notices other verbs send: a merge
(``notify_merged``) and a hand-back (``notify_handed_back``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.durations import parse_duration
from fractal.domain.errors import FractalError, InvalidValue
from fractal.domain.radio import (
    CHANNELS,
    Channel,
    Route,
    can_read,
    check_body,
    check_message_id,
    check_priority,
    feed_hosts,
    merge_notice,
    parse_channel,
    reply_route,
    reply_subject,
    route_post,
    route_send,
)
from fractal.store import radio_reads as reads
from fractal.store.radio_reads import ReadState
from fractal.store.reader import node_rows
from fractal.store.rows import MessageRow
from fractal.store.timefmt import format_ts, parse_ts
from fractal.tree import Tree, resolve_node

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context
    from fractal.store.outbox import Outbox

__all__ = ["Actor", "feed", "message_dict", "messages", "notify_handed_back", "notify_merged",
           "notify_refused", "post", "read", "reply", "save", "send", "sent", "thread", "unsend"]

_SUBJECT_MAX = 120  # characters of a post's first line used as its subject


@dataclass(frozen=True)
class Actor:
    """Who is acting (``branch``) in which ``tree``. Reads go through
    ``store.radio_reads`` (no SQLAlchemy); ``store`` opens the writing store."""

    tree: Tree
    branch: str
    near: str | None = None  # the node whose loop runs the command (short names resolve near it)

    @property
    def db(self) -> Path:
        return self.tree.db_path

    @property
    def store(self) -> Outbox:
        from fractal.store.outbox import Outbox  # deferred: start-up cost (6 modules)

        return Outbox(self.tree.db_path)

    def node(self, name: str | None) -> str:
        """The node ``name`` names (the actor itself when None); raise NodeNotFound."""
        if name is None:
            return self.branch

        known = [row.node for row in node_rows(self.db)]
        return resolve_node(name, [*known, self.tree.root], self.tree, near=self.near)


def actor(ctx: Context) -> Actor:
    """The acting node of the command's context (see the module docstring)."""
    return Actor(ctx.tree, ctx.acting, ctx.loop_near)


def message_dict(m: MessageRow) -> dict[str, object]:
    """A message as a listing row: ``created_at, node`` (the host), ``channel, sender,
    priority, subject, uuid, reply_to, data``."""
    return {"created_at": m.created_at, "node": m.node, "channel": m.channel,
            "sender": m.sender, "priority": m.priority, "subject": m.subject,
            "uuid": m.message_uuid, "reply_to": m.parent_message_uuid, "data": m.data}


def _subject(subject: str | None, data: str) -> str:
    text = (subject if subject is not None else
            next((line for line in data.splitlines() if line.strip()), "")).strip()
    if not text:
        raise InvalidValue("the message has no subject: give --subject TEXT")
    return text if len(text) <= _SUBJECT_MAX else text[:_SUBJECT_MAX - 3] + "..."


def _channel(name: str | None) -> Channel | None:
    return None if name is None else parse_channel(name)


def _store(who: Actor, route: Route, data: str, subject: str, priority: int,
           parent: str | None = None) -> str:
    from fractal.store.radio import Draft  # deferred: start-up cost (5 modules)

    return who.store.post(Draft(host=route.host, channel=route.channel.value,
                                sender=who.branch, subject=subject, data=check_body(data),
                                priority=check_priority(priority), parent=parent))


def send(ctx: Context, data: str, *, node: str | None, to_parent: bool, channel: str | None,
         subject: str, priority: int) -> str:
    """Send ``data`` to ``node`` (or the actor's parent) on ``channel`` (default
    ``inbox``); return the new message's id. Raises InvalidValue (no or two targets,
    the root has no parent, a channel the actor may not write, a bad priority)."""
    who = actor(ctx)
    parent = None
    if to_parent:
        if who.branch == who.tree.root:
            raise InvalidValue(f"{who.branch} is the tree's root: it has no parent; name the "
                               "node with --node NODE")
        parent = who.branch.rsplit(".", 1)[0]
    route = route_send(who.branch, node=who.node(node) if node else None, parent=parent,
                       channel=_channel(channel))
    return _store(who, route, data, _subject(subject, data), priority)


def post(ctx: Context, data: str, *, node: str | None, channel: str | None,
         subject: str | None, priority: int) -> str:
    """Publish ``data``: to the actor's ``outbox`` by default, to another ``node``'s
    ``public`` channel when one is named (``channel`` overrides); return its id. The
    subject defaults to the first line of ``data``."""
    who = actor(ctx)
    route = route_post(who.branch, node=who.node(node) if node else None,
                       channel=_channel(channel))
    return _store(who, route, data, _subject(subject, data), priority)


def since_stamp(text: str | None, now: datetime | None = None) -> str | None:
    """``--since``: a duration back from ``now`` (``30m``, ``2h``, ``1d``) or a UTC
    timestamp (``2026-01-01T10:00:00Z``), as a stored timestamp. Raises InvalidValue."""
    if text is None:
        return None
    try:
        return format_ts(parse_ts(text))
    except (FractalError, ValueError):
        pass
    seconds = parse_duration(text, "--since")
    return format_ts((now or datetime.now(UTC)) - timedelta(seconds=seconds))


def _refuse_read(who: Actor, host: str, channel: Channel) -> None:
    if not can_read(who.branch, host, channel, root=who.tree.root):
        raise InvalidValue(f"{who.branch} cannot read the {channel.value} of {host}: only its "
                           f"owner reads it; read its outbox or public channel, or "
                           f"`fractal radio sent` for what you sent there")


def messages(ctx: Context, *, node: str | None, channel: str | None, state: ReadState,
             limit: int | None, since: str | None) -> list[dict[str, object]]:
    """Messages on ``channel`` (default ``inbox``; with ``state`` SAVED every channel
    unless one is named) of ``node`` (default the actor), newest first, filtered by the
    actor's read receipts (``state``). Raises InvalidValue for an unknown channel or one
    the actor may not read."""
    who = actor(ctx)
    chosen = _channel(channel)
    stamp = since_stamp(since)
    if state is ReadState.SAVED and chosen is None:
        rows = reads.listing(who.db, who.branch, hosts=None, channels=CHANNELS, state=state,
                             since=stamp, limit=limit)
        return [message_dict(m) for m in rows]
    host = who.node(node)
    chosen = chosen or Channel.INBOX
    _refuse_read(who, host, chosen)
    rows = reads.listing(who.db, who.branch, hosts=[host], channels=[chosen.value],
                         state=state, since=stamp, limit=limit)
    return [message_dict(m) for m in rows]


def _visible(who: Actor, uuid: str) -> MessageRow:
    """The message ``uuid`` when the actor may see it (it can read its channel, or sent
    it); raise InvalidValue otherwise, the same way for a hidden and a missing one."""
    mid = check_message_id(uuid)
    row = reads.message(who.db, mid)
    if row is None or row.unsent_at is not None or not (
            row.sender == who.branch or can_read(who.branch, row.node, Channel(row.channel),
                                                 root=who.tree.root)):
        raise InvalidValue(f"no message {mid} that {who.branch} can read; list them with "
                           "`fractal radio messages --all`")
    return row


def read(ctx: Context, uuids: tuple[str, ...], *, node: str | None = None,
         channel: str | None = None) -> list[dict[str, object]]:
    """Return the messages ``uuids`` (every unread one on ``channel``, default ``inbox``,
    of ``node``, default the actor, when none are named), oldest first, and write the
    actor's read receipt for each."""
    who = actor(ctx)
    if uuids:
        rows = [_visible(who, u) for u in uuids]
    else:
        host, chosen = who.node(node), _channel(channel) or Channel.INBOX
        _refuse_read(who, host, chosen)
        rows = list(reversed(reads.listing(who.db, who.branch, hosts=[host],
                                           channels=[chosen.value], state=ReadState.UNREAD)))
    who.store.mark_read(who.branch, [m.message_id for m in rows])
    return [message_dict(m) for m in rows]


def reply(ctx: Context, uuid: str, data: str, *, priority: int | None = None) -> str:
    """Answer message ``uuid``: ``Re: <subject>`` in its thread, routed by
    ``domain.radio.reply_route`` (on a public or private channel in place, otherwise to
    the other party's inbox); the priority defaults to the original's. Returns the new
    id; reading the message to answer it writes the actor's receipt too."""
    who = actor(ctx)
    original = _visible(who, uuid)
    route = reply_route(who.branch, host=original.node, channel=Channel(original.channel),
                        sender=original.sender or original.node)
    who.store.mark_read(who.branch, [original.message_id])
    return _store(who, route, data, reply_subject(original.subject),
                  original.priority if priority is None else priority,
                  parent=original.message_uuid)


def thread(ctx: Context, uuid: str) -> list[dict[str, object]]:
    """The thread of message ``uuid``, oldest first: every message of it the actor may
    see (those it can read or sent). Raises InvalidValue when ``uuid`` is not visible."""
    who = actor(ctx)
    _visible(who, uuid)
    rows = reads.thread(who.db, check_message_id(uuid))
    return [message_dict(m) for m in rows
            if m.sender == who.branch or can_read(who.branch, m.node, Channel(m.channel),
                                                root=who.tree.root)]


def feed(ctx: Context, *, node: str | None, limit: int | None,
         since: str | None) -> list[dict[str, object]]:
    """The ``public`` and ``outbox`` posts of every node below ``node`` (default the
    actor; the root's feed is the whole tree), newest first. Deleted nodes' posts count:
    history outlives its nodes."""
    who = actor(ctx)
    base = who.node(node)
    hosts = feed_hosts(base, reads.hosts(who.db), who.tree.root)
    rows = reads.listing(who.db, who.branch, hosts=hosts,
                         channels=[Channel.PUBLIC.value, Channel.OUTBOX.value],
                         since=since_stamp(since), limit=limit)
    return [message_dict(m) for m in rows]


def sent(ctx: Context, *, limit: int | None, since: str | None) -> list[dict[str, object]]:
    """What the actor sent or posted (not withdrawn), newest first, each with ``read_by``:
    who has read it."""
    who = actor(ctx)
    rows = reads.listing(who.db, who.branch, hosts=None, channels=CHANNELS,
                         sender=who.branch, since=since_stamp(since), limit=limit)
    by = reads.readers(who.db, [m.message_id for m in rows])
    return [{**message_dict(m), "read_by": " ".join(by[m.message_id])} for m in rows]


def unsend(ctx: Context, uuid: str, *, force: bool) -> dict[str, object]:
    """Withdraw a message the actor sent (the row is kept, no listing shows it again).
    Refused when another node has read it already, unless ``force``."""
    who = actor(ctx)
    row = _visible(who, uuid)
    if row.sender != who.branch:
        raise InvalidValue(f"{who.branch} did not send {row.message_uuid} ({row.sender} "
                           "did): only its sender can withdraw a message")
    others = [r for r in reads.readers(who.db, [row.message_id])[row.message_id]
              if r != who.branch]
    if others and not force:
        raise InvalidValue(f"{row.message_uuid} was read already by {', '.join(others)}; "
                           "withdraw it anyway with `fractal radio unsend --force "
                           f"{row.message_uuid}`, or send a correction")
    who.store.unsend(row.message_id)
    return message_dict(row)


def save(ctx: Context, uuid: str, *, saved: bool) -> bool:
    """Save (``saved``) or unsave a message the actor can see, for ``messages --saved``;
    True when that changed anything."""
    who = actor(ctx)
    row = _visible(who, uuid)
    return who.store.set_saved(who.branch, row.message_id, saved)


def notify_merged(tree: Tree, child: str, into: str, sha: str | None,
                  detail: str = "") -> str:
    """Post ``<child> merged into <into> (<sha>)`` (``detail``, e.g. a diffstat, as the
    body) to ``child``'s outbox, so the merge shows in every ancestor's feed; return the
    notice's id. Raises StoreError."""
    from fractal.store.outbox import Outbox  # deferred: start-up cost (6 modules)

    subject, body = merge_notice("merged", child, into, sha, detail)
    return Outbox(tree.db_path).post_notice(child, subject, body)


def notify_handed_back(tree: Tree, child: str, parent: str, sha: str | None,
                       detail: str = "") -> str:
    """Post ``<parent> handed a conflict back to <child> (<sha>)`` (``detail`` as the
    body; ``sha`` the tip of ``parent`` the child received) to ``child``'s outbox; return
    the notice's id. Raises StoreError."""
    from fractal.store.outbox import Outbox  # deferred: start-up cost (6 modules)

    subject, body = merge_notice("handed back", child, parent, sha, detail)
    return Outbox(tree.db_path).post_notice(child, subject, body)


def notify_refused(tree: Tree, child: str, into: str, why: str) -> str:
    """Post ``<child> not merged into <into>: refused`` (``why`` as the body) to
    ``child``'s outbox; return the notice's id. Raises StoreError."""
    from fractal.store.outbox import Outbox  # deferred: start-up cost (6 modules)

    subject, body = merge_notice("refused", child, into, None, why)
    return Outbox(tree.db_path).post_notice(child, subject, body)
