"""``processes.environ_processes`` and ``stop_processes``: finding processes by an environment
entry and stopping them, as crash healing does with ``_NODE=<node_dir>`` (issue 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fractal.procs import processes
from tests.helpers import wait_until

SLEEPER = "import sys, time\nopen(sys.argv[1], 'w').close()\nwhile True: time.sleep(1)\n"
DEAF = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + SLEEPER


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:  # only what this test started
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _spawn(procs: list[subprocess.Popen[bytes]], entry: str, code: str = SLEEPER,
           new_session: bool = True) -> subprocess.Popen[bytes]:
    """Start a child with ``entry`` in its environment; wait until it says it is ready."""
    name, _, value = entry.partition("=")
    ready = Path(value).with_name(f"ready-{len(procs)}")
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)],
                            env={**os.environ, name: value}, start_new_session=new_session)
    procs.append(proc)
    wait_until(ready.exists, timeout=10, message="the child to be ready")
    return proc


def test_entries_match_exactly(started: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    node = tmp_path / "node"
    mine = _spawn(started, f"_NODE={node}")
    other = _spawn(started, f"_NODE={node}.child")  # a child node's dir shares the prefix
    found = {p.pid for p in processes.environ_processes(f"_NODE={node}")}
    assert mine.pid in found and other.pid not in found


def test_stopping_them_spares_the_rest(started: list[subprocess.Popen[bytes]],
                                              tmp_path: Path) -> None:
    entry = f"_NODE={tmp_path / 'gone'}"
    polite = _spawn(started, entry)
    deaf = _spawn(started, entry, DEAF)
    bystander = _spawn(started, f"_NODE={tmp_path / 'alive'}")
    found = processes.environ_processes(entry)
    assert sorted(p.pid for p in found) == sorted([polite.pid, deaf.pid])
    assert processes.stop_processes(found, grace=0.5) == []
    assert polite.wait(timeout=5) == -15 and deaf.wait(timeout=5) == -9
    assert psutil.Process(bystander.pid).is_running()
    assert processes.environ_processes(entry) == []


def test_never_the_callers_own_group(started: list[subprocess.Popen[bytes]],
                                     tmp_path: Path) -> None:
    entry = f"_NODE={tmp_path / 'same-group'}"
    child = _spawn(started, entry, new_session=False)  # in this process's group
    assert processes.environ_processes(entry) == []
    assert child.poll() is None
