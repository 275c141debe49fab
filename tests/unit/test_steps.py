"""Step-file discovery and labels (seed: Step files)."""

from __future__ import annotations

import pytest

from fractal.domain.errors import StepFileError
from fractal.domain.steps.files import StepFile, banner_label, discover_steps, step_label

SEED = ["02-EXECUTE.md", "00-PREPARE.md", "04-COMMIT.md", "01-PLAN.md", "03-REVIEW.md"]


def test_seed_steps_sorted_with_positions() -> None:
    steps = discover_steps(SEED)
    assert [s.name for s in steps] == ["PREPARE", "PLAN", "EXECUTE", "REVIEW", "COMMIT"]
    assert steps[2] == StepFile("02-EXECUTE.md", "02", "EXECUTE", 3, 5)
    assert [s.position for s in steps] == [1, 2, 3, 4, 5]
    assert {s.total for s in steps} == {5}


@pytest.mark.parametrize(("names", "expected"), [
    # Non-.md names and hidden names are ignored.
    (["01-a.md", "notes.txt", "02-b.md~", ".03-hidden.md", ".DS_Store", "README"],
     [("01-a.md", "01", "a")]),
    # Name is the stem past the FIRST dash.
    (["02-foo-bar.md"], [("02-foo-bar.md", "02", "foo-bar")]),
    (["1-x.md.md"], [("1-x.md.md", "1", "x.md")]),
    # Lexicographic order (code points: upper case before lower case).
    (["10-b.md", "10-B.md", "09-z.md"],
     [("09-z.md", "09", "z"), ("10-B.md", "10", "B"), ("10-b.md", "10", "b")]),
    # Same prefix twice is allowed; width is what must agree.
    (["1-a.md", "1-b.md", "2-c.md"],
     [("1-a.md", "1", "a"), ("1-b.md", "1", "b"), ("2-c.md", "2", "c")]),
    (["001-a.md"], [("001-a.md", "001", "a")]),
])
def test_discover(names: list[str], expected: list[tuple[str, str, str]]) -> None:
    steps = discover_steps(names)
    assert [(s.filename, s.prefix, s.name) for s in steps] == expected
    assert [s.position for s in steps] == list(range(1, len(expected) + 1))
    assert all(s.total == len(expected) for s in steps)


@pytest.mark.parametrize("names", [
    [],
    ["notes.txt", "README"],
    [".01-hidden.md", ".md"],
    ["01-a.MD"],
])
def test_no_step_files(names: list[str]) -> None:
    with pytest.raises(StepFileError) as info:
        discover_steps(names)
    assert info.value.reason == "no step files"
    assert "*.md" in info.value.detail


@pytest.mark.parametrize(("names", "offenders"), [
    (["01-a.md", "README.md"], ["README.md"]),
    (["01-a.md", "a-01.md"], ["a-01.md"]),
    (["01-a.md", "01a.md"], ["01a.md"]),
    (["01-a.md", "01-.md"], ["01-.md"]),
    (["01-a.md", "01_b.md"], ["01_b.md"]),
    (["01-a.md", "-a.md"], ["-a.md"]),
    # Mixed digit widths: the minority width is named.
    (["01-a.md", "02-b.md", "3-c.md"], ["3-c.md"]),
    (["1-a.md", "2-b.md", "03-c.md"], ["03-c.md"]),
    # Both a bad name and a width mismatch are reported together.
    (["01-a.md", "02-b.md", "3-c.md", "x.md"], ["3-c.md", "x.md"]),
])
def test_invalid_step_files(names: list[str], offenders: list[str]) -> None:
    with pytest.raises(StepFileError) as info:
        discover_steps(names)
    assert info.value.reason == "invalid step files"
    for offender in offenders:
        assert offender in info.value.detail
    valid = {n for n in names if n not in offenders}
    for name in valid:
        assert f"{name}:" not in info.value.detail
    assert str(info.value).startswith("invalid step files: ")


def test_width_mismatch_explains_widths() -> None:
    with pytest.raises(StepFileError) as info:
        discover_steps(["01-a.md", "02-b.md", "3-c.md"])
    assert "1 digit(s)" in info.value.detail
    assert "use 2" in info.value.detail


@pytest.mark.parametrize(("step", "label", "banner"), [
    (StepFile("02-EXECUTE.md", "02", "EXECUTE", 3, 5), "step 3 of 5 (EXECUTE)", "Step 3/5 (EXECUTE)"),
    (StepFile("1-a.md", "1", "a", 1, 1), "step 1 of 1 (a)", "Step 1/1 (a)"),
])
def test_labels(step: StepFile, label: str, banner: str) -> None:
    assert step_label(step) == label
    assert banner_label(step) == banner
