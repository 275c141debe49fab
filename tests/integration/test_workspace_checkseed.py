"""Seeding the CHECK gate: renumbering around REVIEW, the packaged template, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.assets import asset_root
from fractal.domain.checks.rules import gate_command, gate_on_fail
from fractal.domain.steps.files import discover_steps
from fractal.domain.steps.frontmatter import parse_frontmatter
from fractal.errors import FractalError
from fractal.workspace.checkseed import gate_layout, seed_check_gate
from fractal.workspace.nodedir import seed_node_dir

SEEDS = ["00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-REVIEW.md", "04-COMMIT.md"]


@pytest.mark.parametrize(("names", "renames", "gate"), [
    (SEEDS, [("04-COMMIT.md", "05-COMMIT.md"), ("03-REVIEW.md", "04-REVIEW.md")],
     "03-CHECK.md"),
    (["1-WORK.md", "2-REVIEW.md"], [("2-REVIEW.md", "3-REVIEW.md")], "2-CHECK.md"),
    (["010-A.md", "020-B.md"], [], "021-CHECK.md"),  # no REVIEW: the gate goes last
    ([], [], "00-CHECK.md"),
    (["notes.txt", "01-REVIEW.md"], [("01-REVIEW.md", "02-REVIEW.md")], "01-CHECK.md"),
])
def test_gate_layout(names: list[str], renames: list[tuple[str, str]], gate: str) -> None:
    assert gate_layout(names) == (renames, gate)


def test_seed_check_gate_renumbers_the_seeds(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    seed_node_dir(node_dir)
    review = (node_dir / "steps" / "03-REVIEW.md").read_text()
    path = seed_check_gate(node_dir, "  pytest -q  ")
    names = sorted(p.name for p in (node_dir / "steps").iterdir())
    assert names == ["00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-CHECK.md",
                     "04-REVIEW.md", "05-COMMIT.md"]
    assert [s.name for s in discover_steps(names)] == [
        "PREPARE", "PLAN", "EXECUTE", "CHECK", "REVIEW", "COMMIT"]
    assert (node_dir / "steps" / "04-REVIEW.md").read_text() == review
    fm = parse_frontmatter(path.read_text())
    assert gate_command(fm.fields) == "pytest -q"
    assert gate_on_fail(fm.fields).value == "continue"
    assert "$CHECK_OUTPUT" in fm.body and "@EXIT_CHECK@" not in path.read_text()


def test_the_packaged_template_has_one_placeholder() -> None:
    text = (asset_root() / "gates" / "CHECK.md").read_text()
    assert text.count("@EXIT_CHECK@") == 1
    assert parse_frontmatter(text).fields["check"] == "@EXIT_CHECK@"


def test_seed_check_gate_refuses(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    seed_node_dir(node_dir)
    with pytest.raises(FractalError, match="single line"):
        seed_check_gate(node_dir, "pytest\nruff check")
    (node_dir / "steps" / "05-COMMIT.md").mkdir()  # not a step file, but in the way
    with pytest.raises(FractalError, match=r"05-COMMIT\.md already exists"):
        seed_check_gate(node_dir, "pytest")
