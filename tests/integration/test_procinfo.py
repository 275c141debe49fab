"""procinfo: the /proc reads of a pid's identity agree with psutil's, for live, zombie and
missing processes, and fall back to psutil where /proc cannot tell."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from fractal.procs import procinfo
from tests.helpers import wait_until


def test_create_time_matches_psutil_for_live_processes() -> None:
    for pid in (1, os.getpid(), os.getppid()):
        assert procinfo.create_time(pid) == pytest.approx(psutil.Process(pid).create_time(),
                                                          abs=procinfo.CREATE_TIME_TOLERANCE)
        assert procinfo.same_process(pid, psutil.Process(pid).create_time())


def test_a_zombie_has_a_create_time_but_is_not_the_same_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
        created = procinfo.create_time(child.pid)
        assert created == pytest.approx(psutil.Process(child.pid).create_time(), abs=0.01)
        assert not procinfo.same_process(child.pid, created)
    finally:
        child.wait()


@pytest.mark.parametrize(("pid", "created"), [(2**22 + 12345, 1.0), (0, 1.0), (-5, 1.0)])
def test_no_such_pid(pid: int, created: float) -> None:
    assert not procinfo.same_process(pid, created)
    if pid > 0:
        assert procinfo.create_time(pid) is None


def test_another_create_time_is_another_process() -> None:
    mine = psutil.Process().create_time()
    assert not procinfo.same_process(os.getpid(), mine - 1.0)
    assert procinfo.same_process(os.getpid(), mine + 0.005)


def test_without_proc_the_psutil_answer_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(pid: int) -> tuple[str, float] | None:
        raise LookupError("no /proc")

    monkeypatch.setattr(procinfo, "_stat", no_proc)
    mine = psutil.Process().create_time()
    assert procinfo.create_time(os.getpid()) == mine
    assert procinfo.same_process(os.getpid(), mine)
    assert not procinfo.same_process(os.getpid(), mine - 1.0)
