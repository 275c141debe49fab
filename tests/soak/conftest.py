"""The soak tier's seed, its gate and its summary line.

- Seed: ``FRACTAL_SOAK_SEED`` when set, else a fresh random one; printed in pytest's header
  and summary, and handed to xdist workers through the environment (set before they
  start), so every worker derives the same per-scenario seeds.
- Gate: tests marked ``soak`` are deselected unless the ``-m`` expression names ``soak``
  (``make soak``); ``make test`` runs ``test_quick.py`` alone.
- Summary: ``soak: N scenario(s) run, F fault(s) injected, V invariant violation(s)``,
  totalled from what each test recorded (``run.run_scenario``).

The hooks act in the process that loads this file: pytest's controller when the run names
``tests/soak`` (``make soak`` does), otherwise each worker (summary lines then stay in
the workers).
"""

from __future__ import annotations

import json
import os
import random

import pytest

SEED_ENV = "FRACTAL_SOAK_SEED"
_SEED: list[str] = []
_TOTALS = {"scenarios": 0, "faults": 0, "violations": 0, "seeded": 0}


def soak_seed() -> str:
    """The run's master seed (set at configure time)."""
    if not _SEED:
        _SEED.append(os.environ.get(SEED_ENV) or str(random.SystemRandom().randrange(10**9)))
        os.environ[SEED_ENV] = _SEED[0]  # xdist workers start after this and inherit it
    return _SEED[0]


def pytest_configure(config: pytest.Config) -> None:
    soak_seed()


def pytest_report_header(config: pytest.Config) -> str:
    return (f"soak seed: {soak_seed()} (replay: {SEED_ENV}={soak_seed()} make soak)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "soak" in (config.option.markexpr or ""):
        return
    dropped = [item for item in items if item.get_closest_marker("soak") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key != "soak":
            continue
        data = json.loads(str(value))
        _TOTALS["seeded"] += str(data["seed"]).startswith(f"{soak_seed()}:")
        _TOTALS["scenarios"] += 1
        _TOTALS["faults"] += int(data["faults"])
        _TOTALS["violations"] += len(data["violations"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TOTALS["scenarios"]:
        return
    seeds = f"seed {soak_seed()}" if _TOTALS["seeded"] else "fixed seeds"
    terminalreporter.write_line(
        f"soak: {_TOTALS['scenarios']} scenario(s) run, {_TOTALS['faults']} fault(s) "
        f"injected, {_TOTALS['violations']} invariant violation(s) ({seeds})")
