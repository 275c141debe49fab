"""The packaged seeds: mode lookup, NODE.md sections and variables, runnable scripts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fractal.assets import MODES, asset_root, mode_text
from fractal.errors import FractalError

STEP_FILE = re.compile(r"\d\d-[A-Z]+\.md")


@pytest.mark.parametrize("name", MODES)
def test_mode_text_reads_the_packaged_file(name: str) -> None:
    text = mode_text(name)
    assert text == (asset_root() / "modes" / f"{name}.md").read_text()
    assert text.strip()


def test_modes_directory_matches_the_list() -> None:
    assert sorted(p.stem for p in (asset_root() / "modes").glob("*.md")) == sorted(MODES)
    assert "$META_TARGET" in mode_text("META")


@pytest.mark.parametrize("name", ["NOPE", "sync", "../NODE", ""])
def test_mode_text_refuses_unknown_names(name: str) -> None:
    with pytest.raises(FractalError):
        mode_text(name)


def test_node_template_sections_and_variables() -> None:
    text = (asset_root() / "NODE.md").read_text()
    for heading in ("## Context", "## Instructions", "## Completion Requirements", "## Rules"):
        assert heading in text
    for var in ("CURRENT_BRANCH", "WORKTREE_DIR", "NODE_DIR", "SCOPE_DIR", "ITER_REF",
                "ITER_LABEL", "STEP_LABEL", "TIME_BUDGET", "COST_BUDGET", "FRACTAL_BIN"):
        assert f"${var}" in text
    assert '$FRACTAL_BIN commit "<summary>"' in text


def test_seed_steps_follow_the_filename_contract() -> None:
    names = sorted(p.name for p in (asset_root() / "steps").iterdir())
    assert names == ["00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-REVIEW.md",
                     "04-COMMIT.md"]
    for name in names:
        assert STEP_FILE.fullmatch(name)
        text = (asset_root() / "steps" / name).read_text()
        assert not text.startswith("---")  # no frontmatter in the seeds
        assert "$STEP_LABEL" in text


@pytest.mark.parametrize("name", ["setup.sh", "lint.sh"])
def test_scripts_are_noop_bash(name: str, tmp_path: Path) -> None:
    script = asset_root() / "scripts" / name
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
