"""Attacks through what a node writes or names: escape sequences in its title and radio
messages reaching the operator's terminal, a node name ending in a newline, and a tmux
socket variable naming a file tmux would delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import copy_of_tree, make_repo
from tests.trees import STUB, agent_wrapper, run_cli, run_cli_as

TITLE = "evil\x1b]0;pwned\x07title\x1b[2J"
SUBJECT = "hi\x1b]52;c;ZXZpbA==\x07 there"
BODY = "body\x1b[2J\x1b]0;x\x07more\r\nline two\tend"
_ESCAPES = ("\x1b", "\x07", "\x9b", "\r")


def _build(repo: Path) -> None:
    make_repo(repo)
    agent = agent_wrapper(repo.parent / "bin" / "agent", STUB)
    for args in (["init", "--agent", str(agent)], ["node", "init", "b", "--title", TITLE]):
        out = run_cli_as(repo, *args)
        assert out.returncode == 0, out.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """``main`` with a child ``main.b`` whose title carries escape sequences."""
    return copy_of_tree(tmp_path / "repo", "security-escapes", _build)


def _clean(text: str) -> None:
    assert not any(esc in text for esc in _ESCAPES), repr(text)


def _on_a_terminal(repo: Path, *args: str) -> str:
    """What ``fractal ARGS`` writes to a terminal (a pty as stdout and stderr)."""
    main, tty = os.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "fractal", *args], cwd=repo,
                              stdin=subprocess.DEVNULL, stdout=tty, stderr=tty,
                              timeout=60, check=False)
        os.close(tty)
        tty = -1
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if tty >= 0:
            os.close(tty)
        os.close(main)
    assert proc.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_a_title_reaches_the_terminal_without_its_escapes(repo: Path) -> None:
    screen = _on_a_terminal(repo, "node", "list")
    assert "eviltitle" in screen
    _clean(screen)


def test_a_title_listed_through_a_pipe_has_no_escapes(repo: Path) -> None:
    out = run_cli(["node", "list"], repo)
    assert "eviltitle" in out.stdout
    _clean(out.stdout)


def test_radio_subject_and_body_reach_the_operator_without_escapes(repo: Path) -> None:
    child = repo / ".worktrees" / "main.b"
    sent = run_cli_as(child, "radio", "send", "--parent", "--priority", "1", "--subject",
                      SUBJECT, BODY, loop=child / ".fractal" / "main.b")
    assert sent.returncode == 0, sent.stderr
    listed = run_cli(["radio", "messages"], repo).stdout
    assert "hi there" in listed
    _clean(listed)
    shown = run_cli(["radio", "read"], repo).stdout
    assert "Subject: hi there" in shown
    assert "bodymore\nline two\tend" in shown  # lines and tabs stay
    _clean(shown)


def test_a_node_name_ending_in_a_newline_is_refused(repo: Path) -> None:
    out = run_cli_as(repo, "node", "init", "c\n")
    assert out.returncode != 0
    assert "invalid node name" in out.stderr
    assert not (repo / ".worktrees" / "main.c\n").exists()


def test_a_tmux_socket_variable_naming_a_file_is_refused_and_the_file_kept(
        repo: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (repo / ".worktrees" / "main.b" / ".fractal" / "main.b" / "NODE.md").write_text("a task\n")
    out = run_cli(["node", "start", "b"], repo,
                  env={**os.environ, "FRACTAL_TMUX_SOCKET": str(precious)}, check=False)
    assert out.returncode != 0
    assert "not a socket" in out.stderr
    assert precious.read_text() == "keep me\n"


def test_anything_click_writes_to_a_terminal_is_stripped(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """``cli.safeout.guard_terminal``: not only the listings, every ``click.echo`` (a
    reason in a notice, a status line) reaches a terminal without its escapes."""
    import click

    from fractal.cli.safeout import guard_terminal

    main, tty = os.openpty()
    chunks: list[bytes] = []
    try:
        with open(tty, "w", encoding="utf-8", closefd=False) as out, \
                open(tty, "w", encoding="utf-8", closefd=False) as err:
            monkeypatch.setattr(sys, "stdout", out)
            monkeypatch.setattr(sys, "stderr", err)
            guard_terminal()
            click.echo(f"reason: {TITLE}")
            click.echo(f"notice: {SUBJECT}", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
        os.close(tty)
        tty = -1
        while True:  # all of it: the terminal's other side is closed, so this ends (EIO)
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if tty >= 0:
            os.close(tty)
        os.close(main)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "reason: eviltitle" in screen and "notice: hi there" in screen
    _clean(screen.replace("\r\n", "\n"))


def test_the_dashboards_inbox_shows_a_summary_without_its_escapes() -> None:
    from fractal.domain.attention import Item, Kind
    from fractal.lifecycle.inbox import Entry
    from fractal.tui.render import inbox
    from fractal.tui.snapshot import Snapshot

    kind = next(iter(Kind))
    item = Item(kind, "main.b", 0.0, f"run 1 exited: {TITLE}", "fractal node status b",
                "key", "fp")
    shown = inbox(Snapshot("main", 0.0, (), (Entry(item, False),), ())).plain
    assert "run 1 exited: eviltitle" in shown
    _clean(shown)
