"""``node init``'s seeding rules: the task in NODE.md, approval gates, inheritance."""

from __future__ import annotations

import pytest

from fractal.domain.errors import InvalidValue
from fractal.domain.nodeinit import (
    PREFERENCE_KEYS,
    fill_instructions,
    inherited_preferences,
    match_step,
    parse_inherit,
    restored_settings,
    uncommitted_warning,
    with_approval_gate,
)
from fractal.domain.steps.frontmatter import is_true, parse_frontmatter

STEPS = ["00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-REVIEW.md", "04-COMMIT.md"]


@pytest.mark.parametrize(("text", "expected"), [
    (None, set()), ("steps", {"steps"}), ("steps,scripts", {"steps", "scripts"}),
    (" Config ", {"config"}), ("all", {"steps", "scripts", "config"}),
    ("steps,all", {"steps", "scripts", "config"}),
])
def test_parse_inherit(text: str | None, expected: set[str]) -> None:
    assert parse_inherit(text) == expected


@pytest.mark.parametrize(("text", "why"), [("skills", "unknown surface"), (",", "name what"),
                                           ("steps,budget", "budget")])
def test_parse_inherit_refusals(text: str, why: str) -> None:
    with pytest.raises(InvalidValue, match=why):
        parse_inherit(text)


def test_inherited_preferences_never_copy_budgets_caps_or_lineage() -> None:
    parent = {"agent": "codex", "model": "m1", "effort": None, "sync": False, "max_cost": 9.0,
              "max_iter_cost": 1.0, "max_step_cost": 0.5, "reserve_budget": 0.9,
              "max_depth": 2, "max_children": 3, "max_descendants": 4, "timeout": "1h",
              "max_iters": 5, "scope": ["src"], "parent": "main", "root": "main",
              "title": "lead", "exit_check": "make test", "user": False}
    assert inherited_preferences(parent, {"model": "m2"}) == {"agent": "codex", "sync": False}
    assert not PREFERENCE_KEYS & {"max_cost", "max_iter_cost", "max_step_cost",
                                  "reserve_budget", "max_depth", "timeout", "max_iters"}


NODE_MD = "# Node\n\n## Context\n\n- x\n\n## Instructions\n\n<!-- replace -->\n\n## Rules\n\n- r\n"


@pytest.mark.parametrize(("node_md", "task", "expected"), [
    (NODE_MD, "Build the lexer.\n",
     "# Node\n\n## Context\n\n- x\n\n## Instructions\n\nBuild the lexer.\n\n## Rules\n\n- r\n"),
    (NODE_MD, "  Two\nlines  ",
     "# Node\n\n## Context\n\n- x\n\n## Instructions\n\nTwo\nlines\n\n## Rules\n\n- r\n"),
    ("# Node\n\n## Instructions\n\nold", "new", "# Node\n\n## Instructions\n\nnew\n"),
    ("# Node\n", "task", "# Node\n\n## Instructions\n\ntask\n"),
    ("# N\r\n\r\n## instructions\r\n\r\nold\r\n", "t", "# N\n\n## instructions\n\nt\n"),
])
def test_fill_instructions(node_md: str, task: str, expected: str) -> None:
    assert fill_instructions(node_md, task) == expected


def test_fill_instructions_refuses_an_empty_task() -> None:
    with pytest.raises(InvalidValue, match="task is empty"):
        fill_instructions(NODE_MD, "  \n")


@pytest.mark.parametrize(("gate", "expected"), [
    ("EXECUTE", "02-EXECUTE.md"), ("execute", "02-EXECUTE.md"), ("02", "02-EXECUTE.md"),
    ("02-EXECUTE", "02-EXECUTE.md"), ("02-EXECUTE.md", "02-EXECUTE.md"),
    ("REVIEW", "03-REVIEW.md"),
])
def test_match_step(gate: str, expected: str) -> None:
    assert match_step(STEPS, gate) == expected


def test_match_step_refusals() -> None:
    with pytest.raises(InvalidValue, match=r"no such step.*00-PREPARE, 01-PLAN"):
        match_step(STEPS, "DEPLOY")
    with pytest.raises(InvalidValue, match="matches several"):
        match_step(["01-A.md", "02-A.md"], "A")


@pytest.mark.parametrize("text", [
    "## Execute\n\nbody\n",
    "---\nmodel: m1\n---\nbody\n",
    "---\nrequires_approval: false\nmodel: m1\n---\nbody\n",
    "---\nrequires_approval: true\n---\nbody\n",
])
def test_with_approval_gate(text: str) -> None:
    gated = with_approval_gate(text)
    front = parse_frontmatter(gated)
    assert is_true(front.fields.get("requires_approval"))
    assert front.body == parse_frontmatter(text).body
    assert gated.count("requires_approval") == 1
    assert with_approval_gate(gated) == gated  # idempotent


def test_uncommitted_warning_lists_a_few_paths() -> None:
    text = uncommitted_warning("main.lead", "0123456789abcdef", [f"f{i}" for i in range(7)])
    assert "main.lead has 7 uncommitted change(s)" in text
    assert "0123456789" in text and "f0, f1, f2, f3, f4 and 2 more" in text


@pytest.mark.parametrize(("raw", "kept", "reset"), [
    ({"title": "t", "agent": "claude", "max_iters": 2, "sync": False, "parent": "main.x",
      "root": "main", "user": False, "base": "main.x", "model": None},
     {"title": "t", "agent": "claude", "max_iters": 2, "sync": False}, ()),
    ({"max_iters": 0, "title": "t"}, {"title": "t"}, ("max_iters",)),
    ({"interval": "1m", "sleep": "5s", "title": "t"}, {"title": "t"}, ("interval", "sleep")),
    ({"max_iter_cost": 2.0, "unknown_key": 1}, {}, ("max_iter_cost",)),
])
def test_restored_settings_keep_the_rescued_config_but_lineage_and_invalid_keys(
        raw: dict[str, object], kept: dict[str, object], reset: tuple[str, ...]) -> None:
    assert restored_settings(raw) == (kept, reset)
