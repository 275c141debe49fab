"""The radio on a real tree (real git worktrees, real SQLite): permissions, read receipts,
threads, the feed, withdrawing, saving, the loop's notices, concurrent senders."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from fractal.domain.errors import FractalError, InvalidValue
from fractal.lifecycle import radio
from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store import radio_reads
from fractal.store.ledger import Ledger
from fractal.store.outbox import Outbox
from fractal.store.radio_reads import ReadState
from fractal.tree import Tree, find_tree
from tests.helpers import copy_of_tree, make_repo
from tests.trees import cousins_node_dir, run_cli, run_cli_as


@dataclass
class Nodes:
    tree: Tree
    root: Path
    lead: Path
    div: Path
    other: Path


def _build(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo)
    lead = init_node(open_context(repo), "lead", {"max_iters": 1}).paths.worktree
    init_node(open_context(lead), "div", {"max_iters": 1})
    init_node(open_context(repo), "other", {"max_iters": 1})


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    """``main.lead`` (its child ``main.lead.div``) and ``main.other``, built by the verbs
    once per test process and copied for each test."""
    repo = copy_of_tree(tmp_path / "repo", "radio-lead-div-other", _build)
    tree = find_tree(repo)
    yield Nodes(tree, repo, *(tree.node(b).worktree
                              for b in ("main.lead", "main.lead.div", "main.other")))


def _subjects(rows: list[dict[str, object]]) -> list[object]:
    return [r["subject"] for r in rows]


def test_send_to_parent_lands_in_its_inbox_unread_until_read(nodes: Nodes) -> None:
    mid = radio.send(open_context(nodes.div), "the lexer is done", node=None, to_parent=True, channel=None,
                     subject="lexer done", priority=6)
    assert len(mid) == 8
    unread = radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.UNREAD,
                            limit=None, since=None)
    assert [(r["uuid"], r["node"], r["channel"], r["sender"], r["priority"]) for r in unread] \
        == [(mid, "main.lead", "inbox", "main.lead.div", 6)]
    got = radio.read(open_context(nodes.lead), ())
    assert [(r["uuid"], r["data"]) for r in got] == [(mid, "the lexer is done")]
    # the receipt is written once, for the reader only
    assert radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.UNREAD,
                          limit=None, since=None) == []
    assert _subjects(radio.messages(open_context(nodes.lead), node=None, channel=None,
                                    state=ReadState.READ, limit=None, since=None)) \
        == ["lexer done"]
    sent = radio.sent(open_context(nodes.div), limit=None, since=None)
    assert [(r["uuid"], r["read_by"]) for r in sent] == [(mid, "main.lead")]
    radio.read(open_context(nodes.lead), (mid,))  # reading again keeps the first receipt
    message = radio_reads.message(nodes.tree.db_path, mid)
    assert message is not None
    assert radio_reads.readers(nodes.tree.db_path, [message.message_id]) == {
        message.message_id: ["main.lead"]}


def test_channel_permissions_on_a_real_tree(nodes: Nodes) -> None:
    radio.send(open_context(nodes.div), "x", node=None, to_parent=True, channel=None, subject="s",
               priority=1)
    with pytest.raises(InvalidValue, match=r"cannot read the inbox of main\.lead"):
        radio.messages(open_context(nodes.other), node="lead", channel="inbox", state=ReadState.ALL,
                       limit=None, since=None)
    with pytest.raises(InvalidValue, match=r"cannot post to the outbox of main\.lead"):
        radio.send(open_context(nodes.div), "x", node="lead", to_parent=False, channel="outbox",
                   subject="s", priority=1)
    with pytest.raises(InvalidValue, match="unknown channel 'news'"):
        radio.messages(open_context(nodes.lead), node=None, channel="news", state=ReadState.ALL,
                       limit=None, since=None)
    with pytest.raises(InvalidValue, match="has no parent"):
        radio.send(open_context(nodes.root), "x", node=None, to_parent=True, channel=None, subject="s",
                   priority=1)
    with pytest.raises(FractalError, match="no node found"):
        radio.send(open_context(nodes.div), "x", node="ghost", to_parent=False, channel=None, subject="s",
                   priority=1)
    # a private note is the owner's alone
    note = radio.post(open_context(nodes.lead), "remember the flaky test", node=None, channel="private",
                      subject=None, priority=2)
    with pytest.raises(InvalidValue, match=f"no message {note}"):
        radio.read(open_context(nodes.div), (note,))
    assert _subjects(radio.read(open_context(nodes.lead), (note,))) == ["remember the flaky test"]


def test_inside_a_loop_the_actor_is_the_loops_node_whatever_the_path(
        nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_NODE", str(nodes.tree.node("main.lead.div").node_dir))
    mid = radio.post(open_context(nodes.lead), "posing?", node=None, channel=None, subject=None, priority=5)
    row = radio_reads.message(nodes.tree.db_path, mid)
    assert row is not None
    assert (row.node, row.channel, row.sender) == ("main.lead.div", "outbox", "main.lead.div")


def test_reply_and_thread(nodes: Nodes) -> None:
    question = radio.send(open_context(nodes.div), "which parser?", node=None, to_parent=True, channel=None,
                          subject="parser", priority=4)
    answer = radio.reply(open_context(nodes.lead), question, "recursive descent")
    follow = radio.reply(open_context(nodes.div), answer, "ok, starting")
    # routed to the other party's inbox each time
    assert [(r["uuid"], r["node"], r["sender"]) for r in
            radio.messages(open_context(nodes.div), node=None, channel=None, state=ReadState.ALL,
                           limit=None, since=None)] == [(answer, "main.lead.div", "main.lead")]
    reply_row = radio_reads.message(nodes.tree.db_path, answer)
    assert reply_row is not None
    assert (reply_row.subject, reply_row.parent_message_uuid, reply_row.priority) == \
        ("Re: parser", question, 4)
    for start in (question, answer, follow):  # the same thread from any member
        rows = radio.thread(open_context(nodes.lead), start)
        assert [r["uuid"] for r in rows] == [question, answer, follow]
        assert [r["reply_to"] for r in rows] == [None, question, answer]
    # replying read the original: the receipt is there
    assert radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.UNREAD,
                          limit=None, since=None)[0]["uuid"] == follow
    # a node outside the conversation cannot open it
    with pytest.raises(InvalidValue, match=f"no message {question}"):
        radio.thread(open_context(nodes.other), question)


def test_feed_shows_descendants_public_and_outbox_posts_and_notices(nodes: Nodes) -> None:
    radio.post(open_context(nodes.div), "halfway", node=None, channel=None, subject=None, priority=5)
    radio.post(open_context(nodes.other), "other news", node=None, channel="public", subject=None,
               priority=5)
    radio.send(open_context(nodes.div), "just for you", node=None, to_parent=True, channel=None,
               subject="private-ish", priority=5)
    Outbox(nodes.tree.db_path).post_notice("main.lead.div", "run completed: done", "body")
    lead_feed = radio.feed(open_context(nodes.lead), node=None, limit=None, since=None)
    assert _subjects(lead_feed) == ["run completed: done", "halfway"]
    root_feed = radio.feed(open_context(nodes.root), node=None, limit=None, since=None)
    assert _subjects(root_feed) == ["run completed: done", "other news", "halfway"]
    assert _subjects(radio.feed(open_context(nodes.root), node="other", limit=None, since=None)) == []
    assert _subjects(radio.feed(open_context(nodes.root), node=None, limit=1, since=None)) == \
        ["run completed: done"]
    assert radio.feed(open_context(nodes.root), node=None, limit=None, since="2999-01-01T00:00:00Z") == []
    assert len(radio.feed(open_context(nodes.root), node=None, limit=None, since="1h")) == 3


def test_unsend_keeps_the_row_but_lists_it_nowhere(nodes: Nodes) -> None:
    mid = radio.send(open_context(nodes.div), "oops", node=None, to_parent=True, channel=None,
                     subject="wrong", priority=5)
    with pytest.raises(InvalidValue, match="only its sender"):
        radio.unsend(open_context(nodes.lead), mid, force=False)
    radio.read(open_context(nodes.lead), (mid,))
    with pytest.raises(InvalidValue, match=r"read already by main\.lead"):
        radio.unsend(open_context(nodes.div), mid, force=False)
    radio.unsend(open_context(nodes.div), mid, force=True)
    assert radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.ALL,
                          limit=None, since=None) == []
    assert radio.sent(open_context(nodes.div), limit=None, since=None) == []
    row = radio_reads.message(nodes.tree.db_path, mid)
    assert row is not None and row.unsent_at is not None and row.data == "oops"


def test_save_and_unsave(nodes: Nodes) -> None:
    mid = radio.post(open_context(nodes.div), "keep this", node=None, channel=None, subject=None,
                     priority=5)
    assert radio.save(open_context(nodes.lead), mid, saved=True) is True
    assert radio.save(open_context(nodes.lead), mid, saved=True) is False
    saved = radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.SAVED,
                           limit=None, since=None)
    assert [r["uuid"] for r in saved] == [mid]
    assert radio.messages(open_context(nodes.div), node=None, channel=None, state=ReadState.SAVED,
                          limit=None, since=None) == []
    assert radio.save(open_context(nodes.lead), mid, saved=False) is True
    assert radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.SAVED,
                          limit=None, since=None) == []


def test_merge_and_hand_back_notices_reach_the_parents_feed(nodes: Nodes) -> None:
    radio.notify_merged(nodes.tree, "main.lead.div", "main.lead", "abcdef0123456789",
                        " a.py | 1 +")
    radio.notify_handed_back(nodes.tree, "main.lead", "main", None, "squashed")
    assert _subjects(radio.feed(open_context(nodes.lead), node=None, limit=None, since=None)) == \
        ["main.lead.div merged into main.lead (abcdef0123)"]
    assert _subjects(radio.feed(open_context(nodes.root), node=None, limit=None, since=None)) == [
        "main handed a conflict back to main.lead",
        "main.lead.div merged into main.lead (abcdef0123)"]


def test_run_end_notice_carries_the_spend(nodes: Nodes) -> None:
    store = Ledger(nodes.tree.db_path)
    run_id = store.open_run("main.lead", agent=None, max_cost=None, parent_run_id=None)
    store.post_run_end_notice("main.lead", run_id, "stopped", "Stopped by request")
    row = radio.feed(open_context(nodes.root), node=None, limit=1, since=None)[0]
    assert row["subject"] == "run stopped: Stopped by request"
    assert row["data"] == f"Stopped by request\nrun {run_id} spent $0.0000"


def test_twenty_parallel_senders_lose_no_message(nodes: Nodes) -> None:
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}
    def send(i: int) -> subprocess.CompletedProcess[str]:  # one process per sender
        return run_cli(["radio", "send", f"body {i}", "--parent", "--subject", f"msg {i}",
                        "--priority", str(i % 11)], nodes.div, env=env, check=False,
                       timeout=120)
    with ThreadPoolExecutor(max_workers=20) as pool:
        procs = list(pool.map(send, range(20)))
    assert [p.returncode for p in procs] == [0] * 20, [p.stderr for p in procs]
    ids = {p.stdout.strip() for p in procs}
    assert len(ids) == 20
    rows = radio.messages(open_context(nodes.lead), node=None, channel=None, state=ReadState.ALL,
                          limit=None, since=None)
    assert {r["uuid"] for r in rows} == ids
    assert sorted(str(r["subject"]) for r in rows) == sorted(f"msg {i}" for i in range(20))


def _cli(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "_NODE"}
    return run_cli(["radio", *args], cwd, env=env, input=stdin, timeout=120, check=False)


def test_the_cli_surface(nodes: Nodes) -> None:
    sent = _cli(nodes.div, "send", "-", "--parent", "--subject", "from stdin", "--priority",
                "3", stdin="line one\nline two\n")
    assert sent.returncode == 0, sent.stderr
    mid = sent.stdout.strip()
    listed = _cli(nodes.lead, "messages", "--csv", "--body")
    assert listed.stdout.splitlines()[0] == \
        "created_at,node,channel,sender,priority,subject,uuid,data"
    shown = _cli(nodes.lead, "read")
    assert shown.stdout.splitlines()[:5] == [
        shown.stdout.splitlines()[0], "Subject: from stdin", "", "line one", "line two"]
    assert shown.stdout.startswith(f"[{mid}] ") and "from main.lead.div to main.lead inbox" \
        in shown.stdout
    assert _cli(nodes.lead, "read").stderr.strip() == "no unread messages"
    assert _cli(nodes.lead, "save", mid).stderr.strip() == f"saved {mid}"
    unknown = _cli(nodes.lead, "messages", "--channel", "nope")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "unknown channel 'nope'" in unknown.stderr
    missing = _cli(nodes.div, "send", "x", "--parent", "--priority", "3")
    assert missing.returncode == 2 and "--subject" in missing.stderr
    loud = _cli(nodes.div, "send", "x", "--parent", "--subject", "s", "--priority", "11")
    assert loud.returncode == 2
    bad_id = _cli(nodes.lead, "thread", "xyz")
    assert bad_id.returncode == 1 and "8 hex characters" in bad_id.stderr


def test_the_operator_reads_any_nodes_inbox_and_a_node_still_may_not(cousins: Path) -> None:
    a1 = cousins / ".worktrees" / "main.a1"
    out = run_cli_as(a1, "radio", "send", "--node", "main.a2", "--subject", "heads up",
                     "--priority", "5", "body", loop=cousins_node_dir(cousins, "main.a1"))
    assert out.returncode == 0, out.stderr
    out = run_cli_as(cousins, "radio", "messages", "--node", "main.a2", "--json")
    assert out.returncode == 0, out.stderr
    assert [m["subject"] for m in json.loads(out.stdout)] == ["heads up"]
    out = run_cli_as(a1, "radio", "messages", "--node", "main.a2",
                     loop=cousins_node_dir(cousins, "main.a1"))
    assert out.returncode == 1 and "cannot read the inbox of main.a2" in out.stderr
