"""envsubst-compatible rendering and prompt assembly (seed: What the agent sees each step)."""

from __future__ import annotations

import pytest

from fractal.domain.prompt.render import assemble_prompt, iter_label, iter_ref, render

VARS = {"A": "x", "B": "y", "ITER_REF": "2.3", "A_B": "ab", "EMPTY": "", "LOOP": "$A and ${B}"}


# Expected values were cross-checked against GNU envsubst restricted to the same names.
@pytest.mark.parametrize(("template", "expected"), [
    ("$A", "x"),
    ("${A}", "x"),
    ("${A}${B}", "xy"),
    ("$A$B", "xy"),
    ("pre-$A-post", "pre-x-post"),
    ("ref ${ITER_REF}.", "ref 2.3."),
    # Identifiers are greedy: $A_B is the variable A_B, $A_b an unknown one.
    ("$A_B", "ab"),
    ("$A_b", "$A_b"),
    ("${A}_b", "x_b"),
    # Unknown placeholders pass through verbatim.
    ("$UNKNOWN ${UNKNOWN}", "$UNKNOWN ${UNKNOWN}"),
    ("$a", "$a"),  # names are case-sensitive
    # $$ is not an escape: it passes through, and $$A renders as $ plus A's value.
    ("$$", "$$"),
    ("$$A", "$x"),
    ("$$$A", "$$x"),
    ("echo $$ > pid", "echo $$ > pid"),
    # Positional, empty, defaulting, spaced and unclosed forms are left alone.
    ("$1", "$1"),
    ("$1A", "$1A"),
    ("${}", "${}"),
    ("${A:-z}", "${A:-z}"),
    ("${ A}", "${ A}"),
    ("${A", "${A"),
    ("${A }", "${A }"),
    # A lone dollar anywhere.
    ("$", "$"),
    ("cost $ 5", "cost $ 5"),
    ("a$", "a$"),
    ("\\$A", "\\x"),
    # Empty values substitute to nothing.
    ("[$EMPTY]", "[]"),
    # Substituted values are never re-scanned.
    ("$LOOP", "$A and ${B}"),
    ("${LOOP}!", "$A and ${B}!"),
    # Multi-line text and shell snippets survive.
    ("for f in $FILES; do\n  echo \"$f\" $A\ndone", "for f in $FILES; do\n  echo \"$f\" x\ndone"),
    ("", ""),
])
def test_render(template: str, expected: str) -> None:
    assert render(template, VARS) == expected


def test_render_with_no_variables_is_identity() -> None:
    text = "$A ${B} $$ ${C:-d}"
    assert render(text, {}) == text


@pytest.mark.parametrize(("node_md", "body", "modes", "expected"), [
    ("node", "body", [], "node\n\nbody\n"),
    ("node\n\n\n", "body  \n", ["MODE1\n", "MODE2"], "node\n\nbody\n\nMODE1\n\nMODE2\n"),
    ("", "body", [], "body\n"),
    ("node", "   \n", ["mode"], "node\n\nmode\n"),
    ("node", "", ["", "mode"], "node\n\nmode\n"),
    ("  indented\nnode", "\nbody", [], "  indented\nnode\n\n\nbody\n"),  # leading space kept
    ("", "", [], ""),
])
def test_assemble_prompt(node_md: str, body: str, modes: list[str], expected: str) -> None:
    assert assemble_prompt(node_md, body, modes) == expected


def test_assemble_then_render() -> None:
    prompt = assemble_prompt("Task: $A", "Step ${B} at $ITER_REF", ["keep $$ and $OTHER"])
    assert render(prompt, VARS) == "Task: x\n\nStep y at 2.3\n\nkeep $$ and $OTHER\n"


@pytest.mark.parametrize(("iteration", "max_iters", "expected"), [
    (3, 10, "3 of 10"),
    (3, None, "3 (no limit)"),
    (1, 1, "1 of 1"),
])
def test_iter_label(iteration: int, max_iters: int | None, expected: str) -> None:
    assert iter_label(iteration, max_iters) == expected


@pytest.mark.parametrize(("run_id", "iteration", "expected"), [(2, 3, "2.3"), (10, 1, "10.1")])
def test_iter_ref(run_id: int, iteration: int, expected: str) -> None:
    assert iter_ref(run_id, iteration) == expected
