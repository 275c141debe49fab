"""The tmux boundary against a real private tmux server (fractal/tmux.py).

Servers live under the session's hermetic ``TMUX_TMPDIR`` (tests/conftest.py); each test
gets its own socket and kills its server at teardown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal import tmux
from fractal.errors import TmuxError
from fractal.tmux import Liveness
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

LONG = ["sh", "-c", "echo hello from the pane; exec sleep 300"]


@pytest.fixture
def sock() -> Iterator[Path]:
    """A fresh socket path (short enough for sun_path) on a server killed at teardown."""
    path = Path(os.environ["TMUX_TMPDIR"]) / f"s-{uuid.uuid4().hex[:8]}" / "default"
    yield path
    tmux.kill_server(path)


def _sessions(socket: Path) -> list[str]:
    out = subprocess.run(["tmux", "-S", str(socket), "list-sessions", "-F", "#{session_name}"],
                         capture_output=True, text=True, check=False)
    return out.stdout.split()


@pytest.mark.parametrize(("env", "expected"), [
    ({"FRACTAL_TMUX_SOCKET": "/x/fx.sock", "TMUX_TMPDIR": "/t"}, "/x/fx.sock"),
    ({"TMUX_TMPDIR": "/t"}, f"/t/tmux-{os.getuid()}/default"),
    ({"TMUX_TMPDIR": ""}, f"/tmp/tmux-{os.getuid()}/default"),
    ({}, f"/tmp/tmux-{os.getuid()}/default"),
])
def test_socket_path(env: dict[str, str], expected: str) -> None:
    assert tmux.socket_path(env) == Path(expected)


def test_socket_path_defaults_to_the_process_environment() -> None:
    assert tmux.socket_path() == tmux.socket_path(dict(os.environ))


@pytest.mark.parametrize(("repo", "branch", "prefix"), [
    ("/srv/app", "main", "fx-app-main-"),
    ("/srv/my.app", "main.parser", "fx-my-app-main-parser-"),
    ("/srv/app", "main.a:b c/d", "fx-app-main-a-b-c-d-"),
])
def test_session_name_is_tmux_safe(repo: str, branch: str, prefix: str) -> None:
    name = tmux.session_name(Path(repo), branch)
    assert name.startswith(prefix) and len(name) == len(prefix) + 6
    assert all(c.isalnum() or c in "-_" for c in name)


def test_session_name_separates_repos_with_one_basename(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "repo", tmp_path / "b" / "repo"
    assert tmux.session_name(one, "main") != tmux.session_name(two, "main")
    assert tmux.session_name(one, "main") == tmux.session_name(one, "main")
    assert tmux.session_name(one, "main.x") != tmux.session_name(one, "main-x")


def test_launch_probe_capture_kill(sock: Path, tmp_path: Path) -> None:
    pid = tmux.launch("fx-demo", LONG, cwd=tmp_path, socket=sock)
    assert oct(sock.parent.stat().st_mode & 0o777) == oct(0o700)
    assert tmux.probe("fx-demo", sock) is Liveness.ALIVE
    assert tmux.pane_pid("fx-demo", sock) == pid
    wait_until(lambda: "hello from the pane" in tmux.capture_pane("fx-demo", sock), 10,
               message="pane output")
    assert tmux.kill_session("fx-demo", sock) is True
    assert tmux.probe("fx-demo", sock) is Liveness.GONE
    assert tmux.kill_session("fx-demo", sock) is False
    assert tmux.pane_pid("fx-demo", sock) is None


def test_launch_quotes_words_runs_in_cwd_and_sets_env(sock: Path, tmp_path: Path) -> None:
    command = ["sh", "-c", 'printf "[%s]" "$@" "$PWD" "$FX_VALUE"; exec sleep 300', "sh",
               "a b", "c'd", "$HOME"]
    tmux.launch("fx-words", command, cwd=tmp_path, socket=sock, env={"FX_VALUE": "v 1"})
    expected = f"[a b][c'd][$HOME][{tmp_path}][v 1]"
    wait_until(lambda: expected in tmux.capture_pane("fx-words", sock).replace("\n", ""), 10,
               message="quoted words")


def test_pane_window_is_200x50(sock: Path, tmp_path: Path) -> None:
    tmux.launch("fx-size", LONG, cwd=tmp_path, socket=sock)
    out = subprocess.run(["tmux", "-S", str(sock), "display-message", "-p", "-t", "=fx-size:",
                          "#{window_width}x#{window_height} #{remain-on-exit}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["200x50", "off"]


def test_session_ends_with_its_command(sock: Path, tmp_path: Path) -> None:
    tmux.launch("fx-keep", LONG, cwd=tmp_path, socket=sock)  # keeps the server up
    pid = tmux.launch("fx-short", ["sh", "-c", "exit 0"], cwd=tmp_path, socket=sock)
    assert pid > 0
    wait_until(lambda: tmux.probe("fx-short", sock) is Liveness.GONE, 10, message="ended")


def test_probe_on_a_never_started_socket_is_gone(tmp_path: Path) -> None:
    assert tmux.probe("fx-any", tmp_path / "nothing" / "default") is Liveness.GONE
    assert tmux.probe("fx-any", tmp_path / "not-a-dir.txt" / "default") is Liveness.GONE


def test_probe_on_a_stale_socket_is_gone(sock: Path, tmp_path: Path) -> None:
    tmux.launch("fx-stale", LONG, cwd=tmp_path, socket=sock)
    tmux.kill_server(sock)
    assert tmux.probe("fx-stale", sock) is Liveness.GONE


def test_probe_without_tmux_is_unknown(sock: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    tmux.launch("fx-live", LONG, cwd=tmp_path, socket=sock)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert tmux.probe("fx-live", sock) is Liveness.UNKNOWN
    assert tmux.probe("fx-live", tmp_path / "never" / "default") is Liveness.GONE
    with pytest.raises(TmuxError, match="tmux is not installed"):
        tmux.launch("fx-other", LONG, cwd=tmp_path, socket=sock)


def test_probe_error_other_than_gone_is_unknown(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "default").write_text("not a socket")
    locked.chmod(0o000)
    try:
        if os.access(locked / "default", os.R_OK):
            pytest.skip("running as a user that ignores permissions (root)")
        assert tmux.probe("fx-any", locked / "default") is Liveness.UNKNOWN
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("stderr", ["protocol version mismatch", "server exited unexpectedly"])
def test_probe_on_an_unrecognised_tmux_error_is_unknown(
        sock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str) -> None:
    tmux.launch("fx-live", LONG, cwd=tmp_path, socket=sock)
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    fake = fake_bin / "tmux"
    fake.write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    assert tmux.probe("fx-live", sock) is Liveness.UNKNOWN


def test_probe_and_kill_match_exact_names(sock: Path, tmp_path: Path) -> None:
    tmux.launch("ab", LONG, cwd=tmp_path, socket=sock)
    assert tmux.probe("a", sock) is Liveness.GONE
    assert tmux.probe("ab", sock) is Liveness.ALIVE
    assert tmux.pane_pid("a", sock) is None
    assert tmux.kill_session("a", sock) is False
    assert tmux.probe("ab", sock) is Liveness.ALIVE


def test_names_from_dotted_paths_are_not_rewritten(sock: Path, tmp_path: Path) -> None:
    name = tmux.session_name(tmp_path / "my.repo", "main.parser:x")
    tmux.launch(name, LONG, cwd=tmp_path, socket=sock)
    assert _sessions(sock) == [name]
    assert tmux.probe(name, sock) is Liveness.ALIVE


@pytest.mark.parametrize("name", ["main.parser", "a:b", ""])
def test_launch_refuses_names_tmux_would_rewrite(sock: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(TmuxError, match="session_name"):
        tmux.launch(name, LONG, cwd=tmp_path, socket=sock)
    assert not sock.exists()


def test_second_launch_with_the_same_name_refuses(sock: Path, tmp_path: Path) -> None:
    first = tmux.launch("fx-once", LONG, cwd=tmp_path, socket=sock)
    with pytest.raises(TmuxError, match="session fx-once already exists"):
        tmux.launch("fx-once", LONG, cwd=tmp_path, socket=sock)
    assert tmux.pane_pid("fx-once", sock) == first
    assert _sessions(sock) == ["fx-once"]


def test_capture_of_a_missing_session_raises(sock: Path, tmp_path: Path) -> None:
    tmux.launch("fx-here", LONG, cwd=tmp_path, socket=sock)
    with pytest.raises(TmuxError, match="cannot capture session fx-her"):
        tmux.capture_pane("fx-her", sock)


def test_kill_server_on_a_dead_socket_is_quiet(tmp_path: Path) -> None:
    tmux.kill_server(tmp_path / "none" / "default")


@pytest.mark.parametrize(("inside", "expected"), [
    (False, "not a terminal"),  # attach-session needs a tty: proves the exec happened
    # Inside the same server but in a session no client shows (a detached pane): no client
    # to switch, so it nests a client (with $TMUX unset) instead of failing with tmux's
    # raw "no current client".
    (True, "not a terminal"),
])
def test_attach_execs_the_right_tmux_verb(sock: Path, tmp_path: Path, inside: bool,
                                          expected: str) -> None:
    tmux.launch("fx-att", LONG, cwd=tmp_path, socket=sock)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if inside:
        env["TMUX"] = f"{sock},1,0"
    code = ("from pathlib import Path; from fractal import tmux; "
            f"tmux.attach('fx-att', Path({str(sock)!r}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode != 0
    assert expected in out.stdout + out.stderr
