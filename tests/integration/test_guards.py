"""The suite's own guards (tests/guards.py): leftovers are named, non-loopback is refused."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from tests.guards import LeakGuard, NetworkBlocked, _loopback


@pytest.mark.parametrize(("family", "address", "allowed"), [
    (socket.AF_INET, ("127.0.0.1", 80), True),
    (socket.AF_INET, ("127.8.9.10", 80), True),
    (socket.AF_INET, ("localhost", 80), True),
    (socket.AF_INET, ("10.0.0.1", 80), False),
    (socket.AF_INET, ("example.com", 443), False),
    (socket.AF_INET6, ("::1", 80, 0, 0), True),
    (socket.AF_INET6, ("::ffff:127.0.0.1", 80, 0, 0), True),
    (socket.AF_INET6, ("2001:db8::1", 80, 0, 0), False),
    (socket.AF_UNIX, "/tmp/any.sock", True),
])
def test_only_loopback_and_unix_addresses_pass(family: int, address: object,
                                               allowed: bool) -> None:
    assert _loopback(family, address) is allowed


def test_a_connection_outside_loopback_is_refused_before_it_is_made() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(NetworkBlocked, match=r"192\.0\.2\.1.*only 127\.0\.0\.0/8"):
            sock.connect(("192.0.2.1", 9))
        assert sock.connect_ex(("127.0.0.1", 9)) != 0  # loopback passes (nothing listens)
    finally:
        sock.close()


def _guard(tmp_path: Path) -> LeakGuard:
    return LeakGuard.begin(os.environ["HOME"], (Path(os.environ["TMUX_TMPDIR"]),),
                           (str(tmp_path),))


def test_a_leftover_child_and_a_daemon_are_named_then_cleaned(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    child = subprocess.Popen(["sleep", "30"])
    subprocess.run(["sh", "-c", f"cd '{tmp_path}' && setsid sleep 31 >/dev/null 2>&1 &"],
                   check=True)
    left = guard.check(grace=0.2)
    words = sorted(" ".join(p.cmdline()) for p in left.processes)
    assert words == ["sleep 30", "sleep 31"]
    assert "process" in left.describe() and "sleep 31" in left.describe()
    guard.clean(left)
    child.wait(timeout=10)
    assert not guard.check(grace=0.2)


def test_a_finished_process_and_a_waited_child_are_not_leftovers(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    subprocess.run(["true"], check=True)
    assert not guard.check(grace=0.2)


def test_a_running_non_daemon_thread_is_named(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="held-open")
    thread.start()
    try:
        left = guard.check(grace=0.1)
        assert left.threads == [thread]
        assert "held-open" in left.describe()
    finally:
        release.set()
        thread.join(timeout=5)
    assert not guard.check(grace=0.1)
