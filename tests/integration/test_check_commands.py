"""Check commands against real processes: run_teed under a timeout (the exit check's
runner) and the bounded log read."""

from __future__ import annotations

import time
from pathlib import Path

from fractal.domain.run.outcome import EXIT_TIMEOUT
from fractal.procs.commands import run_teed
from fractal.runtime.checks import read_log
from tests.helpers import SCALE, pid_alive

STUBS = Path(__file__).resolve().parents[1] / "stubs"


def test_run_teed_timeout_stops_the_group_and_keeps_the_log(tmp_path: Path) -> None:
    log, echoed = tmp_path / "check.log", bytearray()
    started = time.monotonic()
    code = run_teed([str(STUBS / "proc_setsid_child.sh")], cwd=tmp_path,
                    env={"PATH": "/bin:/usr/bin"},
                    log_path=log, echo=echoed.extend, grace=0.3, timeout=1.0 * SCALE)
    assert code == EXIT_TIMEOUT
    assert time.monotonic() - started < 1.3 + 3.0 * SCALE
    text = log.read_text()
    assert text == echoed.decode()
    assert not pid_alive(int(text.split()[0]))  # the escapee in its own session is gone too


def test_run_teed_without_timeout_returns_the_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "check.log"
    code = run_teed(["bash", "-c", "echo 'FAILED t.py::test_a'; exit 1"], cwd=tmp_path,
                    env={"PATH": "/bin:/usr/bin"}, log_path=log)
    assert (code, log.read_text()) == (1, "FAILED t.py::test_a\n")


def test_read_log_keeps_head_and_tail_of_a_huge_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    first, last = b"first error line\n", b"3 failed, 1 passed in 9.00s\n"
    log.write_bytes(first + b"x" * (6 << 20) + b"\n" + last)
    text = read_log(log)
    assert text.startswith("first error line") and text.endswith(last.decode())
    assert "[...]" in text and len(text) < (4 << 20) + 100
    assert read_log(tmp_path / "missing.log") == ""
    small = tmp_path / "small.log"
    small.write_bytes(b"ok \xff\n")
    assert read_log(small) == "ok \ufffd\n"
