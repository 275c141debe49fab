"""The flat frontmatter grammar (seed: Step frontmatter)."""

from __future__ import annotations

import pytest

from fractal.domain.steps.frontmatter import (
    frontmatter_warnings,
    is_true,
    normalise_newlines,
    parse_frontmatter,
)

BASIC = "---\nrequires_approval: true\ntimeout: 10m\n---\n## Execute\nbody\n"


@pytest.mark.parametrize(("text", "fields", "body", "has_block"), [
    (BASIC, {"requires_approval": "true", "timeout": "10m"}, "## Execute\nbody\n", True),
    # BOM, CRLF and lone CR change nothing.
    ("\ufeff" + BASIC, {"requires_approval": "true", "timeout": "10m"}, "## Execute\nbody\n", True),
    (BASIC.replace("\n", "\r\n"), {"requires_approval": "true", "timeout": "10m"},
     "## Execute\nbody\n", True),
    (BASIC.replace("\n", "\r"), {"requires_approval": "true", "timeout": "10m"},
     "## Execute\nbody\n", True),
    ("\ufeff" + BASIC.replace("\n", "\r\n"), {"requires_approval": "true", "timeout": "10m"},
     "## Execute\nbody\n", True),
    # Fences tolerate trailing spaces and tabs.
    ("---   \nmodel: x\n--- \t\nbody", {"model": "x"}, "body", True),
    # Unclosed block: no frontmatter, the body is the whole (normalised) text.
    ("---\nmodel: x\nbody\n", {}, "---\nmodel: x\nbody\n", False),
    ("\ufeff---\r\nmodel: x\r\n", {}, "---\nmodel: x\n", False),
    # The block must open on the very first line.
    ("\n---\nmodel: x\n---\nbody", {}, "\n---\nmodel: x\n---\nbody", False),
    ("text\n---\nmodel: x\n---\n", {}, "text\n---\nmodel: x\n---\n", False),
    (" ---\nmodel: x\n---\n", {}, " ---\nmodel: x\n---\n", False),
    ("----\nmodel: x\n----\n", {}, "----\nmodel: x\n----\n", False),
    # Empty block and empty file.
    ("---\n---\nbody", {}, "body", True),
    ("---\n---", {}, "", True),
    ("", {}, "", False),
    ("no block at all\n", {}, "no block at all\n", False),
    # First occurrence of a key wins.
    ("---\nmodel: a\nmodel: b\n---\n", {"model": "a"}, "", True),
    # An empty occurrence is not a field, so a later non-empty one counts.
    ("---\nmodel:\nmodel:   \nmodel: b\n---\n", {"model": "b"}, "", True),
    # Upper-case, indented, spaced, dashed and colon-less keys are ignored.
    ("---\nModel: a\nMODEL: b\n  model: c\nmodel : d\nmy-key: e\n1key: f\nplain\n---\n",
     {}, "", True),
    # Quotes stay literal; values are stripped; inner colons and spaces survive.
    ("---\nmodel: \"gpt\"\ntitle:   a: b  c  \nq: 'x'\n---\n",
     {"model": '"gpt"', "title": "a: b  c", "q": "'x'"}, "", True),
    # Tab after the colon; key with digits and underscores; no space after colon is ignored.
    ("---\nkey_2:\tv\ntimeout:10m\n---\n", {"key_2": "v"}, "", True),
    # Nothing nests: an indented continuation is ignored, its parent is kept if non-empty.
    ("---\nagent: claude\n  nested: x\n---\n", {"agent": "claude"}, "", True),
    # Closes at the NEXT fence: later fences belong to the body.
    ("---\na: 1\n---\nb\n---\nc: 2\n", {"a": "1"}, "b\n---\nc: 2\n", True),
    # Body keeps its leading blank line.
    ("---\na: 1\n---\n\nbody\n", {"a": "1"}, "\nbody\n", True),
])
def test_parse_frontmatter(text: str, fields: dict[str, str], body: str, has_block: bool) -> None:
    parsed = parse_frontmatter(text)
    assert dict(parsed.fields) == fields
    assert parsed.body == body
    assert parsed.has_block is has_block


def test_fields_are_read_only() -> None:
    parsed = parse_frontmatter(BASIC)
    with pytest.raises(TypeError):
        parsed.fields["model"] = "x"  # type: ignore[index]


@pytest.mark.parametrize(("text", "expected"), [
    ("\ufeffa\r\nb\rc\n", "a\nb\nc\n"),
    ("a\r\r\nb", "a\n\nb"),
    ("x\ufeff", "x\ufeff"),  # only a leading BOM is dropped
    ("", ""),
])
def test_normalise_newlines(text: str, expected: str) -> None:
    assert normalise_newlines(text) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True),
    ("True", False),
    ("TRUE", False),
    ("yes", False),
    ("1", False),
    ("on", False),
    ("false", False),
    ("", False),
    (" true", False),
    (None, False),
])
def test_is_true(value: str | None, expected: bool) -> None:
    assert is_true(value) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("no block at all\n", []),
    ("---\ntimeout: 10m\nrequires_approval: true\n---\nbody\n", []),
    ("---\ncheck: pytest -q\non_fail: stop-iteration\n---\n", []),
    ("---\ndetached: false\n---\n", []),
    ("---\n# a comment\n  indented: x\n---\n", []),
    ("---\ncheck: exit 3\non_fail: stop-iteration\n",
     ["the first line opens a --- block that never closes, so no frontmatter was read and "
      "the whole file, block included, is the prompt"]),
    ("---\nTimeout: 1s\n---\n", ["'Timeout: 1s' is ignored: write it as 'timeout: value' "
                               "(lower-case key at the start of the line, a space after the "
                               "colon)"]),
    ("---\nrequires_approval:true\n---\n", ["'requires_approval:true' is ignored: write it as "
                                           "'requires_approval: value' (lower-case key at "
                                           "the start of the line, a space after the colon)"]),
    ("---\n  model: x\n\"agent\": y\nNote: prose is not a key\n---\n", [
        "'model: x' is ignored: write it as 'model: value' (lower-case key at the start of "
        "the line, a space after the colon)",
        "'\"agent\": y' is ignored: write it as 'agent: value' (lower-case key at the start "
        "of the line, a space after the colon)"]),
    ("---\ntimout: 1s\n---\n",
     ["unknown key 'timout:' is ignored (known: agent, check, detached, effort, fix, "
      "max_fix_rounds, model, on_fail, on_fail_final, pass_score, pool, provider, "
      "requires_approval, timeout, wait)"]),
    ("---\nmodel:\n---\n", ["'model:' has no value and is ignored"]),
    ("---\nrequires_approval: yes\n---\n",
     ["requires_approval: 'yes' means false: only 'true' turns it on"]),
    ("\ufeff---\r\nrequires_approval: True\r\n---\r\n",
     ["requires_approval: 'True' means false: only 'true' turns it on"]),
])
def test_frontmatter_warnings(text: str, expected: list[str]) -> None:
    assert frontmatter_warnings(text) == expected
