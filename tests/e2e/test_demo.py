"""``fractal demo``: the main job end to end, and what ``--force`` may replace."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tests.e2e.conftest import run_cli


def _runs(target: Path) -> list[tuple[object, ...]]:
    con = sqlite3.connect(target / ".fractal" / "main" / "fractal.db")
    try:
        return list(con.execute("SELECT status, exit_code FROM runs"))
    finally:
        con.close()


NO_PAUSES = {"FRACTAL_DEMO_THINK_S": "0"}
"""The demo agent's pauses to watch are for people: 8 s of a run here."""


def test_the_demo_fixes_the_sample_and_force_replaces_only_a_demo(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    env = {**os.environ, **NO_PAUSES}
    first = run_cli(["demo", str(target)], tmp_path, env=env, timeout=300)
    assert "demo: node main.fix_tests completed; tests pass" in first.stdout + first.stderr
    assert _runs(target) == [("completed", 0)]

    again = run_cli(["demo", str(target)], tmp_path, check=False)
    assert again.returncode == 1 and "exists; remove it or pass --force" in again.stderr

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    refused = run_cli(["demo", str(precious), "--force"], tmp_path, check=False)
    assert refused.returncode == 1 and "is not an earlier demo" in refused.stderr
    assert (precious / "notes.txt").read_text() == "keep me"

    lookalike = tmp_path / "lookalike"  # the demo's directory names, not its history
    (lookalike / "calc").mkdir(parents=True)
    (lookalike / ".worktrees" / "main.fix_tests").mkdir(parents=True)
    (lookalike / "important.txt").write_text("keep me")
    refused = run_cli(["demo", str(lookalike), "--force"], tmp_path, check=False)
    assert refused.returncode == 1 and (lookalike / "important.txt").exists()

    (target / "stale.txt").write_text("from the first demo")
    replaced = run_cli(["demo", str(target), "--force"], tmp_path, env=env, timeout=300)
    assert "tests pass" in replaced.stdout + replaced.stderr
    assert not (target / "stale.txt").exists() and _runs(target) == [("completed", 0)]
