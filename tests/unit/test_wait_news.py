"""domain/digest.py: what a waiting loop counts as news (a SYNC is launched for it) and
the digest's hand-back line."""

from __future__ import annotations

import pytest

from fractal.domain.digest import Digest, DigestKey, news, render_digest

BASE = DigestKey(children=(("main.l.a", "active"), ("main.l.b", "active")),
                 gates=frozenset({7}), newest_notice=40, unread=frozenset({3}))


@pytest.mark.parametrize(("now", "expected"), [
    (BASE, False),  # nothing moved: a quiet look
    (BASE._replace(children=(("main.l.a", "completed"), ("main.l.b", "active"))), True),
    (BASE._replace(children=(("main.l.a", "exited"), ("main.l.b", "active"))), True),
    (BASE._replace(children=(("main.l.a", "paused"), ("main.l.b", "active"))), False),
    (BASE._replace(children=(*BASE.children, ("main.l.c", "idle"))), False),  # its spawn
    (BASE._replace(children=(*BASE.children, ("main.l.c", "completed"))), True),
    (BASE._replace(gates=frozenset({7, 9})), True),  # a gate opened
    (BASE._replace(gates=frozenset()), False),  # a gate approved
    (BASE._replace(newest_notice=41), True),
    (BASE._replace(unread=frozenset({3, 4})), True),  # a message arrived
    (BASE._replace(unread=frozenset()), False),  # a message read
    (BASE._replace(handed_to_me=True), True),  # a hand-back into the node
    # the wait holds for a child nobody started: the agent must hear of it once
    (BASE._replace(stuck=frozenset({"main.l.b"})), True),
])
def test_news(now: DigestKey, expected: bool) -> None:
    assert news(BASE, now) is expected


def test_a_stuck_child_is_news_once() -> None:
    told = BASE._replace(stuck=frozenset({"main.l.b"}))
    assert news(told, told) is False
    assert news(told, BASE) is False  # it was started meanwhile


def test_news_before_any_sync_and_after_a_settled_child_retired() -> None:
    assert news(None, DigestKey()) is True
    settled = BASE._replace(children=(("main.l.a", "completed"), ("main.l.b", "active")))
    retired = BASE._replace(children=(("main.l.a", "retired"), ("main.l.b", "active")))
    assert news(settled, retired) is False
    assert news(settled._replace(handed_to_me=True), retired._replace(handed_to_me=True)) \
        is False


def test_the_digest_names_the_hand_backs_to_merge_again() -> None:
    lines = render_digest(Digest(hand_backs=[("wordcount", "completed")])).splitlines()
    assert lines[2:] == [
        "- Child notices: none.", "- Gates pending: none.",
        "- Handed back, not merged again (1):",
        "  - wordcount (completed): once it settled, merge it again with "
        "`$FRACTAL_BIN node merge wordcount`",
        "- Unread messages: none."]
