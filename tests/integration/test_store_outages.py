"""The shared provider outages on a real tree database: recording the first failure, one
probe among the nodes, the next attempt's longer wait, a cut-short wake, and the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.domain.usage.outage import OUTAGE_PROBE_STALE, OutageState, outage_backoff
from fractal.store.outages import Outages

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

NOW = 1_800_000_000.0


def _backoff(attempt: int) -> float:
    return outage_backoff(attempt, 30, 1800)


def test_an_outage_is_recorded_then_probed_by_one_node_and_backs_off(tmp_path: Path) -> None:
    outages = Outages(tmp_path / "fractal.db")
    assert outages.outage("cred") is None
    row = outages.record("cred", "HTTP 529", "main.a", NOW, _backoff)
    assert (row.label, row.attempts, row.wake_at, row.state, row.closed_by) == (
        "HTTP 529", 1, NOW + 30, OutageState.WAITING, "main.a")
    # another node's launch that began before the row existed keeps it as it is
    assert outages.record("cred", "HTTP 500", "main.b", NOW + 5, _backoff) == row
    assert not outages.claim_probe("cred", "main.a", NOW + 10)  # too early
    won = [n for n in ("main.a", "main.b") if outages.claim_probe("cred", n, NOW + 30)]
    assert won == ["main.a"]
    assert outages.claim_probe("cred", "main.a", NOW + 31)  # the holder keeps it
    assert not outages.claim_probe("cred", "main.b", NOW + 31)
    row = outages.record("cred", "HTTP 529", "main.a", NOW + 40, _backoff)  # the probe failed
    assert (row.attempts, row.wake_at, row.state, row.prober) == (
        2, NOW + 40 + 60, OutageState.WAITING, None)
    assert outages.clear("cred") and outages.outage("cred") is None
    assert not outages.clear("cred")


def test_a_silent_probe_is_taken_over(tmp_path: Path) -> None:
    outages = Outages(tmp_path / "fractal.db")
    outages.record("cred", "connection", "main.a", NOW, _backoff)
    assert outages.claim_probe("cred", "main.a", NOW + 30)
    assert not outages.claim_probe("cred", "main.b", NOW + 30 + OUTAGE_PROBE_STALE - 1)
    assert outages.claim_probe("cred", "main.b", NOW + 30 + OUTAGE_PROBE_STALE)


def test_a_wait_cut_short_lets_the_next_launch_probe(tmp_path: Path) -> None:
    outages = Outages(tmp_path / "fractal.db")
    outages.record("cred", "HTTP 503", "main.a", NOW, _backoff)
    assert outages.wake_now("cred", NOW + 1)
    assert not outages.wake_now("cred", NOW + 2)  # already due
    assert outages.claim_probe("cred", "main.a", NOW + 2)
    assert not outages.wake_now("cred", NOW + 3)  # a probe runs: nothing to cut
    assert not outages.wake_now("other", NOW)
