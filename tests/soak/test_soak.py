"""Every fault scenario, ``FRACTAL_SOAK_ROUNDS`` times each (default 2), with injection
points drawn from the run's seed (``make soak``; see docs/reliability.md)."""

from __future__ import annotations

import os

import pytest

from tests.soak.conftest import soak_seed
from tests.soak.run import Recorder, describe, run_scenario
from tests.soak.scenarios import NEEDS_ROOT, SCENARIOS

ROUNDS = int(os.environ.get("FRACTAL_SOAK_ROUNDS", "2"))

pytestmark = [pytest.mark.soak, pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.mark.parametrize("round_", range(1, ROUNDS + 1))
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fault_scenario(name: str, round_: int,
                        record_property: Recorder) -> None:
    if name in NEEDS_ROOT and os.geteuid() != 0:
        pytest.skip(f"{name} mounts a full tmpfs: needs root")
    seed = f"{soak_seed()}:{name}:{round_}"
    violations, notes = run_scenario(name, seed, record_property)
    assert not violations, describe(name, seed, violations, notes)
