"""One shared stop window over several groups never signals a group whose pgid was
recycled during the grace: a group that died early is not signalled again by pgid, and
its recycled pgid's new members are not taken for late forks."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fractal.procs import processes, procinfo
from fractal.procs.processes import Launched
from tests.helpers import wait_until

STUBS = Path(__file__).resolve().parents[1] / "stubs"
NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _spawn(launches: list[Launched], argv: list[str]) -> Launched:
    launched = processes.spawn_group(argv, cwd=STUBS, env=os.environ)
    launches.append(launched)
    return launched



def _impostor_at(pid: int) -> subprocess.Popen[bytes] | None:
    """A process of another session (its own group leader) given ``pid``, through the
    kernel's next-pid knob; None when another process took the pid first."""
    for _ in range(20):
        NS_LAST_PID.write_text(str(pid - 1))
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True,
                                env={"PATH": os.environ.get("PATH", "")})
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="needs the next-pid knob")
def test_a_group_recycled_during_the_shared_grace_is_never_signalled(
        spawned: list[Launched]) -> None:
    quick = _spawn(spawned, ["sleep", "300"])  # ends at TERM
    spawned_at = time.monotonic()  # after quick's start, on a clock /proc's ticks can't skew
    stubborn = _spawn(spawned, [str(STUBS / "proc_ignore_term.sh")])  # only KILL ends it
    assert stubborn.popen.stdout is not None
    assert stubborn.popen.stdout.readline().strip() == b"ready"
    # A process is its pid and its start time to CREATE_TIME_TOLERANCE: a pid reused
    # sooner than that after its first owner started is the same process to any reader
    # of /proc (only the next-pid knob below reuses one that fast). The impostor must be
    # born past that tolerance for the test to ask the real question.
    wait_until(lambda: time.monotonic() - spawned_at > 5 * procinfo.CREATE_TIME_TOLERANCE,
               5, message="the clock past the quick group's start")
    handles = [quick.handle, stubborn.handle]
    left: list[list[int]] = []
    stopper = threading.Thread(target=lambda: left.append(
        processes.kill_groups(handles, grace=3.0)))
    stopper.start()
    try:
        quick.popen.wait(timeout=10)  # reaped: its pid (and pgid) is free again
        impostor = _impostor_at(quick.handle.pid)
        if impostor is None:
            pytest.skip("another process took the freed pid")
        try:
            stopper.join(timeout=30)
            assert left == [[]]
            assert stubborn.popen.wait(timeout=10) != 0
            assert impostor.poll() is None, "a recycled pgid was signalled"
        finally:
            impostor.kill()
            impostor.wait()
    finally:
        stopper.join(timeout=30)
    wait_until(lambda: processes.marked_processes(stubborn.handle.marker) == [], 5,
               message="the stubborn group is gone")
