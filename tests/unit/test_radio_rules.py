"""The radio's pure rules: channel permissions, routing of sends, posts and replies, ids,
priorities, feeds and the notices' texts."""

from __future__ import annotations

import pytest

from fractal.domain.errors import InvalidValue
from fractal.domain.radio import (
    CHANNELS,
    Channel,
    Route,
    can_read,
    can_write,
    check_message_id,
    check_priority,
    feed_hosts,
    gate_notice,
    is_descendant,
    merge_notice,
    parse_channel,
    reply_route,
    reply_subject,
    route_post,
    route_send,
    run_end_notice,
)

OWNER, OTHER = "main.lead", "main.lead.div"


@pytest.mark.parametrize(("channel", "owner_reads", "other_reads", "owner_writes",
                          "other_writes"), [
    (Channel.PUBLIC, True, True, True, True),
    (Channel.PRIVATE, True, False, True, False),
    (Channel.INBOX, True, False, True, True),
    (Channel.OUTBOX, True, True, True, False),
])
def test_channel_permissions(channel: Channel, owner_reads: bool, other_reads: bool,
                             owner_writes: bool, other_writes: bool) -> None:
    assert can_read(OWNER, OWNER, channel) is owner_reads
    assert can_read(OTHER, OWNER, channel) is other_reads
    assert can_write(OWNER, OWNER, channel) is owner_writes
    assert can_write(OTHER, OWNER, channel) is other_writes


def test_channels_are_the_four_defaults() -> None:
    assert CHANNELS == ("public", "private", "inbox", "outbox")


@pytest.mark.parametrize("name", ["public", "private", "inbox", "outbox", " inbox "])
def test_parse_channel_known(name: str) -> None:
    assert parse_channel(name).value == name.strip()


@pytest.mark.parametrize("name", ["", "Inbox", "news", "out box"])
def test_parse_channel_unknown_is_an_error_naming_the_channels(name: str) -> None:
    with pytest.raises(InvalidValue, match="public, private, inbox, outbox"):
        parse_channel(name)


@pytest.mark.parametrize(("node", "parent", "channel", "expected"), [
    ("main.x", None, None, Route("main.x", Channel.INBOX)),
    (None, "main", None, Route("main", Channel.INBOX)),
    ("main.x", None, Channel.PUBLIC, Route("main.x", Channel.PUBLIC)),
    (OTHER, None, Channel.OUTBOX, Route(OTHER, Channel.OUTBOX)),  # its own outbox
])
def test_route_send(node: str | None, parent: str | None, channel: Channel | None,
                    expected: Route) -> None:
    assert route_send(OTHER, node=node, parent=parent, channel=channel) == expected


@pytest.mark.parametrize(("node", "parent", "channel", "why"), [
    (None, None, None, "--node NODE or --parent"),
    ("main.x", "main", None, "not both"),
    ("main.x", None, Channel.OUTBOX, "only its owner writes"),
    ("main.x", None, Channel.PRIVATE, "only its owner writes"),
])
def test_route_send_refusals(node: str | None, parent: str | None, channel: Channel | None,
                             why: str) -> None:
    with pytest.raises(InvalidValue, match=why):
        route_send(OTHER, node=node, parent=parent, channel=channel)


@pytest.mark.parametrize(("node", "channel", "expected"), [
    (None, None, Route(OTHER, Channel.OUTBOX)),
    (OTHER, None, Route(OTHER, Channel.OUTBOX)),
    ("main", None, Route("main", Channel.PUBLIC)),
    (None, Channel.PUBLIC, Route(OTHER, Channel.PUBLIC)),
    (None, Channel.PRIVATE, Route(OTHER, Channel.PRIVATE)),
])
def test_route_post(node: str | None, channel: Channel | None, expected: Route) -> None:
    assert route_post(OTHER, node=node, channel=channel) == expected


def test_route_post_refuses_another_nodes_outbox() -> None:
    with pytest.raises(InvalidValue, match="cannot post to the outbox of main"):
        route_post(OTHER, node="main", channel=Channel.OUTBOX)


@pytest.mark.parametrize(("actor", "host", "channel", "sender", "expected"), [
    # a message in my inbox: the answer goes to its sender's inbox
    (OWNER, OWNER, Channel.INBOX, OTHER, Route(OTHER, Channel.INBOX)),
    # a notice in a child's outbox: to the child's inbox
    (OWNER, OTHER, Channel.OUTBOX, OTHER, Route(OTHER, Channel.INBOX)),
    # a follow-up to what I sent: to the recipient's inbox
    (OTHER, OWNER, Channel.INBOX, OTHER, Route(OWNER, Channel.INBOX)),
    # public and private threads stay in place
    (OWNER, "main", Channel.PUBLIC, "main.x", Route("main", Channel.PUBLIC)),
    (OWNER, OWNER, Channel.PRIVATE, OWNER, Route(OWNER, Channel.PRIVATE)),
])
def test_reply_route(actor: str, host: str, channel: Channel, sender: str,
                     expected: Route) -> None:
    assert reply_route(actor, host=host, channel=channel, sender=sender) == expected


@pytest.mark.parametrize(("subject", "expected"), [
    ("hi", "Re: hi"), ("Re: hi", "Re: hi"), ("re: hi", "re: hi"), ("Reply", "Re: Reply")])
def test_reply_subject(subject: str, expected: str) -> None:
    assert reply_subject(subject) == expected


@pytest.mark.parametrize(("text", "ok"), [
    ("0a1b2c3d", True), ("0A1B2C3D", True), (" 0a1b2c3d ", True), ("0a1b2c3", False),
    ("0a1b2c3d4", False), ("zzzzzzzz", False), ("", False)])
def test_check_message_id(text: str, ok: bool) -> None:
    if ok:
        assert check_message_id(text) == text.strip().lower()
    else:
        with pytest.raises(InvalidValue, match="8 hex characters"):
            check_message_id(text)


@pytest.mark.parametrize(("priority", "ok"), [(0, True), (10, True), (5, True), (-1, False),
                                              (11, False)])
def test_check_priority(priority: int, ok: bool) -> None:
    if ok:
        assert check_priority(priority) == priority
    else:
        with pytest.raises(InvalidValue, match="0 \\(lowest\\) to 10"):
            check_priority(priority)


@pytest.mark.parametrize(("branch", "ancestor", "expected"), [
    ("main.a", "main", True), ("main.a.b", "main.a", True), ("main.ab", "main.a", False),
    ("main.a", "main.a", False), ("main", "main", False), ("main.a", "main.a.b", False)])
def test_is_descendant(branch: str, ancestor: str, expected: bool) -> None:
    assert is_descendant(branch, ancestor, "main") is expected


def test_feed_hosts_are_strict_descendants_and_the_root_sees_all() -> None:
    known = ["main", "main.a", "main.a.b", "main.ab", "main.c"]
    assert feed_hosts("main.a", known, "main") == ["main.a.b"]
    assert feed_hosts("main", known, "main") == ["main.a", "main.a.b", "main.ab", "main.c"]
    assert feed_hosts("main.c", known, "main") == []


@pytest.mark.parametrize(("spend", "unpriced", "figures", "body"), [
    (1.5, 0, "", "all done\nrun 3 spent $1.5000"),
    (None, 2, "", "all done\nrun 3 spent unknown (2 step(s) without a recorded cost)"),
    (0.25, 0, "cap $1", "all done\nrun 3 spent $0.2500\ncap $1"),
])
def test_run_end_notice(spend: float | None, unpriced: int, figures: str, body: str) -> None:
    assert run_end_notice("completed", "all done", run_id=3, spend=spend, unpriced=unpriced,
                          figures=figures) == ("run completed: all done", body)


def test_gate_notice_names_the_approve_command_and_carries_the_diffstat() -> None:
    subject, body = gate_notice("EXECUTE", "main.lead.div", 12, " a.py | 2 +-\n 1 file")
    assert subject == "EXECUTE awaits approval: fractal node approve main.lead.div 12"
    assert body == "fractal node approve main.lead.div 12\n\n a.py | 2 +-\n 1 file"
    assert gate_notice("X", "main.a", 1, "")[1].endswith("(no changes against the fork point)")


def test_merge_notice() -> None:
    assert merge_notice("merged", "main.a", "main", "0123456789abcdef", "stat") == (
        "main.a merged into main (0123456789)", "stat")
    assert merge_notice("handed back", "main.a", "main", None) == (
        "main handed a conflict back to main.a", "")  # the parent hands, the child receives
    assert merge_notice("handed back", "main.a", "main", "0123456789abcdef", "x") == (
        "main handed a conflict back to main.a (0123456789)", "x")
    assert merge_notice("refused", "main.a", "main", None, " dirty \n") == (
        "main.a not merged into main: refused", "dirty")
    with pytest.raises(ValueError, match="unknown merge notice kind"):
        merge_notice("landed", "main.a", "main", None)
