"""A node's relay holds up against a flood of requests without a token (issue 29, the
review's case 6). Another tree's agent can reach the socket. On the code before the
fix, 12 connections each sending 15 MB with no newline grew the supervisor from 30 to
206 MB and 19 threads, and a connection that sent nothing was held for ever. Now one
request is capped (``MAX_REQUEST``, refused past it, nothing more read), a caller has
``READ_TIMEOUT`` seconds to send it, and at most ``MAX_CALLS`` connections are answered
at once (one more is refused at once, unread). The flood here is kept small: the
machine is shared."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.relayclient import short_address
from fractal.runtime.relay import MAX_CALLS, MAX_REQUEST, READ_TIMEOUT
from tests.helpers import wait_until
from tests.trees import Tree

pytestmark = pytest.mark.e2e


def _waiting_agent(path: Path, release: Path) -> Path:
    """A command agent that waits (at most 300 s) until ``release`` exists, then ends its
    step with a zero cost: the node's launch, and its relay, stay up meanwhile."""
    path.write_text(f"""#!{sys.executable}
import json, os, sys, time
sys.stdin.read()
deadline = time.monotonic() + 300
while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
    time.sleep(0.2)
print(json.dumps({{"type": "cost", "usd": 0.0}}))
""")
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def _connected(relay: Path, timeout: float) -> Iterator[socket.socket]:
    """A connection to the relay socket at ``relay`` (blocking calls time out after
    ``timeout`` seconds)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    address, fd = short_address(relay)
    try:
        sock.connect(address)
    finally:
        os.close(fd)
    with sock:
        yield sock


def _answer(sock: socket.socket) -> str:
    """The stderr of the relay's one-line answer on ``sock``."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return base64.b64decode(json.loads(b"".join(chunks))["stderr"]).decode()


def test_a_relay_caps_a_request_its_read_time_and_its_connections(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    release = tmp_path / "release"
    try:
        agent = _waiting_agent(tmp_path / "waiting-agent", release)
        tree.node("v", {"01-WAIT.md": "wait"}, "--max-cost", "1", "--max-iters", "1",
                  "--no-sync", "--agent", str(agent))
        relay = tree.repo / ".fractal" / "main" / "relay" / "main.v.sock"
        tree.cli("node", "start", "v")
        tree.wait_running("v", timeout=120)
        wait_until(relay.exists, timeout=60, message="the relay socket")
        supervisor = tree.supervisor("v")
        threads = supervisor.num_threads()
        # a caller that sends nothing is let go after READ_TIMEOUT
        began = time.monotonic()
        with _connected(relay, READ_TIMEOUT + 30) as silent:
            assert "the relay refused the command: timed out" in _answer(silent)
        assert time.monotonic() - began < READ_TIMEOUT + 20
        # a request past the cap is refused; nothing more of it is read
        with _connected(relay, 60) as large:
            head = b'{"argv": ["x"], "pad": "'  # one byte past the cap: all of it is read
            large.sendall(head + b"A" * (MAX_REQUEST + 1 - len(head)))
            assert f"the request is larger than {MAX_REQUEST} bytes" in _answer(large)
        # MAX_CALLS connections held open, then one more: refused at once, unread
        with contextlib.ExitStack() as stack:
            for _ in range(MAX_CALLS):
                held = stack.enter_context(_connected(relay, 60))
                held.sendall(b'{"argv": ["x"], "pad": "' + b"A" * 65536)
            began = time.monotonic()
            with _connected(relay, 60) as extra:
                assert f"{MAX_CALLS} commands of this node are already running" in \
                    _answer(extra)
            assert time.monotonic() - began < READ_TIMEOUT
            assert supervisor.num_threads() <= threads + MAX_CALLS + 1
        # the relay still answers (here: the refusal of a request without the token)

        def answered() -> str | None:
            with _connected(relay, 60) as sock:
                sock.sendall(json.dumps({"argv": ["node", "status"], "cwd": "/",
                                         "token": ""}).encode() + b"\n")
                text = _answer(sock)
            return None if "already running" in text else text

        text = wait_until(answered, timeout=30, message="a free relay call")
        assert "does not carry this launch's token" in str(text)
        release.touch()
        assert tree.wait_settled("v", timeout=120) in ("completed", "idle")
    finally:
        release.touch()
        tree.kill_sessions()
