"""A radio post over the body cap is refused through the verb, before anything is
stored (real git, real SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.domain.errors import InvalidValue
from fractal.domain.radio import CHANNELS, MAX_BODY_BYTES
from fractal.lifecycle import radio
from fractal.lifecycle.context import open_context
from fractal.lifecycle.trees import init_tree
from fractal.store import radio_reads
from fractal.store.engine import close_engines
from fractal.store.radio_reads import ReadState
from tests.helpers import make_repo


def test_a_radio_post_over_the_cap_is_refused_before_anything_is_stored(
        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    try:
        with pytest.raises(InvalidValue, match="over the radio's cap"):
            radio.post(open_context(repo), "x" * (MAX_BODY_BYTES + 1), node=None,
                       channel=None, subject="big", priority=5)
        radio.post(open_context(repo), "x" * MAX_BODY_BYTES, node=None, channel=None,
                   subject="at the cap", priority=5)
        db = repo / ".fractal" / "main" / "fractal.db"
        rows = radio_reads.listing(db, "main", hosts=None,
                                   channels=[str(getattr(c, "value", c)) for c in CHANNELS],
                                   state=ReadState.ALL)
        assert [m.subject for m in rows] == ["at the cap"]
    finally:
        close_engines()


DEEP = "[" * 200_000 + "]" * 200_000  # nested past the JSON parser's depth


def test_json_an_agent_writes_nested_past_the_parsers_depth_is_bad_input_not_a_crash(
        tmp_path: Path) -> None:
    """A node's agent writes its own config.json (or prints a protocol line) nested past
    the parser's depth: the verbs say the config is bad (was an internal error), the
    dashboard's snapshot shows the node without its config (the RecursionError ended
    the operator's dashboard), and the line is text, not a failed step."""
    from fractal.agents.base import TextEvent
    from fractal.agents.command import CommandParser
    from fractal.agents.jsonl import json_object
    from fractal.errors import ConfigError
    from fractal.lifecycle.spawn import init_node
    from fractal.tree import Tree
    from fractal.tui.snapshot import Builder
    from fractal.workspace.nodedir import read_config

    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    try:
        made = init_node(open_context(repo), "a", {"max_cost": 1.0})
        config = made.paths.config_path
        config.write_text(DEEP)
        with pytest.raises(ConfigError, match="nested deeper"):
            read_config(config)
        snap = Builder(Tree(repo=repo, root="main")).build(force=True)
        assert snap.node("main.a") is not None
    finally:
        close_engines()
    line = '{"type": "cost", "usd": ' + DEEP + "}"
    assert json_object(line) is None
    assert [type(e) for e in CommandParser().feed(line)] == [TextEvent]


def test_an_endless_standard_input_is_refused_at_the_cap_not_read_whole(
        tmp_path: Path) -> None:
    """``yes | fractal radio post -`` never ends its input: the command read it whole
    (its memory grew until it was killed); it reads one character past the cap and
    refuses."""
    import subprocess
    import sys

    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    close_engines()
    endless = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        done = subprocess.run([sys.executable, "-m", "fractal", "radio", "post", "-",
                               "--subject", "endless"], cwd=repo, stdin=endless.stdout,
                              capture_output=True, text=True, timeout=60)
    finally:
        endless.kill()
        endless.wait()
    assert done.returncode == 1, done.stderr
    assert "over the radio's cap" in done.stderr
    assert "the message body is more than 65536 bytes," in done.stderr
