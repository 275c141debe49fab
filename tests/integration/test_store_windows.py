"""The shared usage windows on a real tree database: closing, one probe among many
nodes racing for it, reopening, the release in slots, and the misses that back the
next wake off."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from fractal.domain.usage.windows import BACKOFF_FIRST, PROBE_STALE, RESUME_JITTER, WindowState
from fractal.store.windows import Windows

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

NOW = 1_800_000_000.0


def test_a_window_closes_and_waits_for_its_reset(tmp_path: Path) -> None:
    windows = Windows(tmp_path / "fractal.db")
    assert windows.window("cred") is None
    row = windows.close("cred", "five_hour", NOW + 600, "main.a", NOW)
    assert row.state is WindowState.CLOSED and row.window == "five_hour"
    assert row.wake_at == NOW + 600 + RESUME_JITTER and row.misses == 0
    assert not windows.claim_probe("cred", "main.a", NOW + 10)  # too early
    assert windows.release_slot("cred") == -1


def test_exactly_one_node_probes_then_the_rest_are_released_in_slots(tmp_path: Path) -> None:
    windows = Windows(tmp_path / "fractal.db")
    windows.close("cred", "five_hour", NOW, "main.a", NOW - 100)
    after = NOW + RESUME_JITTER
    won = [n for n in ("main.a", "main.b", "main.c") if windows.claim_probe("cred", n, after)]
    assert won == ["main.a"]
    assert windows.claim_probe("cred", "main.a", after + 1)  # the holder keeps it
    assert not windows.reopen("cred", "main.b", after + 2)  # only the probe reopens
    assert windows.reopen("cred", "main.a", after + 2)
    row = windows.window("cred")
    assert row is not None and row.state is WindowState.OPEN and row.opened_at == after + 2
    assert [windows.release_slot("cred") for _ in range(4)] == [0, 1, 2, 3]


def test_a_probe_that_hits_the_window_again_backs_off(tmp_path: Path) -> None:
    windows = Windows(tmp_path / "fractal.db")
    windows.close("cred", "five_hour", NOW, "main.a", NOW - 100)
    assert windows.claim_probe("cred", "main.a", NOW + RESUME_JITTER)
    row = windows.close("cred", "five_hour", NOW, "main.a", NOW + 10)  # the stated reset passed
    assert row.misses == 1 and row.wake_at == NOW + 10 + BACKOFF_FIRST
    assert windows.claim_probe("cred", "main.b", row.wake_at)
    row = windows.close("cred", "five_hour", None, "main.b", row.wake_at + 1)
    assert row.misses == 2 and row.wake_at == NOW + 10 + BACKOFF_FIRST + 1 + 2 * BACKOFF_FIRST
    # a new reset ahead is waited for whatever the misses
    assert windows.claim_probe("cred", "main.b", row.wake_at)
    row = windows.close("cred", "five_hour", row.wake_at + 3600, "main.b", row.wake_at)
    assert row.resets_at is not None and row.wake_at == row.resets_at + RESUME_JITTER


def test_a_silent_probe_is_taken_over(tmp_path: Path) -> None:
    windows = Windows(tmp_path / "fractal.db")
    windows.close("cred", "seven_day", NOW, "main.a", NOW - 100)
    assert windows.claim_probe("cred", "main.a", NOW + RESUME_JITTER)
    assert not windows.claim_probe("cred", "main.b", NOW + RESUME_JITTER + 1)
    assert windows.claim_probe("cred", "main.b", NOW + RESUME_JITTER + PROBE_STALE)
    row = windows.window("cred")
    assert row is not None and row.prober == "main.b"


def test_closing_an_already_closed_window_keeps_the_later_wake(tmp_path: Path) -> None:
    windows = Windows(tmp_path / "fractal.db")
    windows.close("cred", "five_hour", NOW + 900, "main.a", NOW)
    row = windows.close("cred", "five_hour", NOW + 300, "main.b", NOW + 1)
    assert row.wake_at == NOW + 900 + RESUME_JITTER


def _claim(db: str, node: str, queue: multiprocessing.Queue[str]) -> None:
    if Windows(Path(db)).claim_probe("cred", node, NOW + RESUME_JITTER):
        queue.put(node)


def test_racing_processes_elect_one_probe(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    Windows(db).close("cred", "five_hour", NOW, "main.a", NOW - 100)
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[str] = ctx.Queue()
    workers = [ctx.Process(target=_claim, args=(str(db), f"main.n{i}", queue))
               for i in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    winners = []
    while not queue.empty():
        winners.append(queue.get())
    assert len(winners) == 1
    row = Windows(db).window("cred")
    assert row is not None and row.prober == winners[0]
