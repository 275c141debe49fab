"""The short soak that runs in ``make test``: five scenarios, one round each, with a fixed
seed so the injection points are the same on every run (``make soak`` draws new ones)."""

from __future__ import annotations

import pytest

from tests.soak.run import Recorder, describe, run_scenario

QUICK = ("supervisor-mid-step", "supervisor-mid-setup", "agent-killed", "tmux-kill-server",
         "index-lock-left")
SEED = "quick"

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", QUICK)
def test_quick_fault_scenario(name: str, record_property: Recorder) -> None:
    seed = f"{SEED}:{name}"
    violations, notes = run_scenario(name, seed, record_property)
    assert not violations, describe(name, seed, violations, notes)
