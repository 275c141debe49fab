"""The pane's transcript: ``<node_dir>/pane.log`` keeps what the pane showed."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from fractal.agents.base import TextEvent, ToolEvent
from fractal.runtime.pane import PaneReporter


def test_the_transcript_holds_what_the_pane_showed(tmp_path: Path) -> None:
    pane = io.StringIO()
    log = tmp_path / "pane.log"
    reporter = PaneReporter(pane, transcript=log)
    reporter.banner_open("Iteration 1 of 2", major=True)
    reporter.agent_event(TextEvent(text="fixed mean()\nall green"))
    reporter.agent_event(ToolEvent(name="Bash", detail="pytest -q"))
    reporter.raw_output(b"setup: ok \xff\n")
    reporter.warning("something odd")
    assert log.read_text() == pane.getvalue()
    assert "fixed mean()\nall green\n  > Bash: pytest -q\nsetup: ok \ufffd\n" in log.read_text()


def test_a_later_run_appends(tmp_path: Path) -> None:
    log = tmp_path / "pane.log"
    PaneReporter(io.StringIO(), transcript=log).line("run 1")
    PaneReporter(io.StringIO(), transcript=log).line("run 2")
    assert log.read_text() == "run 1\nrun 2\n"


def test_the_transcript_rotates_into_one_backup(tmp_path: Path) -> None:
    log = tmp_path / "pane.log"
    reporter = PaneReporter(io.StringIO(), transcript=log, transcript_bytes=1000)
    for n in range(300):
        reporter.line(f"line {n:03d}")
    assert log.stat().st_size <= 1000
    assert (tmp_path / "pane.log.1").stat().st_size <= 1000
    assert not (tmp_path / "pane.log.2").exists()
    assert log.read_text().splitlines()[-1] == "line 299"


def _occupy(log: Path, make: str) -> None:
    """Put a FIFO, a directory or a symlink (to ``elsewhere`` beside it) at ``log``."""
    if make == "fifo":
        os.mkfifo(log)
    elif make == "directory":
        log.mkdir()
    else:
        log.symlink_to(log.parent / "elsewhere")


@pytest.mark.parametrize("make", ["fifo", "directory", "symlink"])
def test_an_odd_transcript_path_is_skipped_and_the_pane_still_works(tmp_path: Path,
                                                                     make: str) -> None:
    log = tmp_path / "pane.log"
    _occupy(log, make)
    pane = io.StringIO()
    PaneReporter(pane, transcript=log).line("still shown")
    assert pane.getvalue() == "still shown\n"
    assert not (tmp_path / "elsewhere").exists()


def test_a_vanished_node_dir_drops_lines_quietly(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    pane = io.StringIO()
    reporter = PaneReporter(pane, transcript=node_dir / "pane.log")
    (node_dir / "pane.log").unlink()
    node_dir.rmdir()
    reporter.line("after")
    assert pane.getvalue() == "after\n"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("make", ["fifo", "directory", "symlink"])
def test_a_transcript_replaced_mid_run_stops_instead_of_growing_unseen(tmp_path: Path,
                                                                      make: str) -> None:
    log = tmp_path / "pane.log"
    pane = io.StringIO()
    reporter = PaneReporter(pane, transcript=log)
    reporter.line("before")
    log.unlink()
    _occupy(log, make)
    for n in range(3):
        reporter.line(f"after {n}")  # must neither block nor write anywhere
    assert pane.getvalue().splitlines() == ["before", "after 0", "after 1", "after 2"]
    assert not (tmp_path / "elsewhere").exists()


def test_a_deleted_transcript_starts_afresh(tmp_path: Path) -> None:
    log = tmp_path / "pane.log"
    reporter = PaneReporter(io.StringIO(), transcript=log)
    reporter.line("old")
    log.unlink()
    reporter.line("new")
    assert log.read_text() == "new\n"


def test_warnings_are_clipped(tmp_path: Path) -> None:
    pane = io.StringIO()
    PaneReporter(pane).warning("x" * 50_000)
    assert len(pane.getvalue()) < 2_200


def test_held_text_is_written_once_in_order_on_release(tmp_path: Path) -> None:
    class Counting(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            Counting.writes += 1
            return super().write(text)

    pane = Counting()
    log = tmp_path / "pane.log"
    reporter = PaneReporter(pane, transcript=log)
    reporter.hold()
    reporter.banner_close("Step 1/1 (A)", "done", 0.0)
    reporter.notice("backstop commit 0123456789: main: iteration 1.1 (auto)")
    reporter.banner_open("Iteration 2", major=True)
    assert pane.getvalue() == "" and log.read_text() == ""
    reporter.release()
    assert Counting.writes == 1
    assert pane.getvalue().splitlines() == [
        "--- Step 1/1 (A): done (0s) ---",
        "[fractal] backstop commit 0123456789: main: iteration 1.1 (auto)", "",
        "=== Iteration 2 ==="]
    assert log.read_text() == pane.getvalue()
    reporter.line("straight through")
    assert pane.getvalue().endswith("straight through\n") and Counting.writes == 2


def test_a_wait_releases_the_held_text(tmp_path: Path) -> None:
    from fractal.runtime.waker import Waker

    pane = io.StringIO()
    reporter = PaneReporter(pane)
    waker = Waker(before_wait=reporter.release)
    reporter.hold()
    reporter.notice("sleeping 60s before the next iteration")
    waker.wake()
    waker.wait(0.0)
    assert pane.getvalue() == "[fractal] sleeping 60s before the next iteration\n"
