"""Plan file names and wiki pages/indexes: the pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from fractal.domain.errors import InvalidValue
from fractal.domain.plans import (
    PlanName,
    check_iter_ref,
    check_slug,
    default_title,
    parse_plan_name,
    plan_filename,
    plan_text,
)
from fractal.domain.wiki import (
    GENERATED_NOTE,
    MalformedPage,
    Page,
    index_title,
    parse_page,
    render_index,
)

MOMENT = datetime(2026, 12, 1, 10, 5, 9, 999999, tzinfo=UTC)


def test_plan_filename_and_its_parse() -> None:
    name = plan_filename(MOMENT, "2.3", "parser-rewrite")
    assert name == "20261201T100509Z-2.3-parser-rewrite.md"
    assert parse_plan_name(name) == PlanName("20261201T100509Z", "2.3", "parser-rewrite")
    east = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert plan_filename(east, "2.3", "x") == "20261201T100509Z-2.3-x.md"


@pytest.mark.parametrize("slug", ["a", "parser-rewrite", "v2-fix", "x" * 60])
def test_check_slug_accepts(slug: str) -> None:
    assert check_slug(slug) == slug


@pytest.mark.parametrize("slug", ["", "Parser", "a--b", "-a", "a-", "a b", "a_b", "../x",
                                  "x" * 61])
def test_check_slug_refuses(slug: str) -> None:
    with pytest.raises(InvalidValue, match="not a slug"):
        check_slug(slug)


@pytest.mark.parametrize(("ref", "ok"), [("2.3", True), ("0.0", True), (" 12.40 ", True),
                                         ("2", False), ("2.x", False), ("-1.2", False)])
def test_check_iter_ref(ref: str, ok: bool) -> None:
    if ok:
        assert check_iter_ref(ref) == ref.strip()
    else:
        with pytest.raises(InvalidValue, match=r"RUN\.ITER"):
            check_iter_ref(ref)


@pytest.mark.parametrize("name", ["notes.md", "20261201T100509Z-2.3-x.txt", ".gitkeep",
                                  "20261201-2.3-x.md", "20261201T100509Z-2-x.md"])
def test_parse_plan_name_ignores_other_files(name: str) -> None:
    assert parse_plan_name(name) is None


def test_plan_title_and_text() -> None:
    assert default_title("parser-rewrite") == "Parser rewrite"
    assert plan_text(" Rewrite the parser ") == "# Rewrite the parser\n\n"
    with pytest.raises(InvalidValue, match="one non-empty line"):
        plan_text("two\nlines")


@pytest.mark.parametrize(("text", "title", "summary"), [
    ("# Build\n\nHow to build the project.\n", "Build", "How to build the project."),
    ("\n\n# Build #\nfirst\n", "Build", "first"),
    ("# T\n\n<!-- c -->\n## Sub\n```\ncode\n```\n---\nReal line.", "T", "Real line."),
    ("# Only a title\n", "Only a title", ""),
    ("# T\n" + "w" * 200, "T", "w" * 157 + "..."),
])
def test_parse_page(text: str, title: str, summary: str) -> None:
    assert parse_page("p.md", text) == Page("p.md", title, summary)


@pytest.mark.parametrize(("text", "why"), [
    ("", "is empty"), ("  \n\n", "is empty"), ("Intro\n# T\n", "does not start with a title"),
    ("## T\n", "does not start with a title"), ("#T\n", "does not start with a title"),
])
def test_parse_page_malformed(text: str, why: str) -> None:
    with pytest.raises(MalformedPage, match=why):
        parse_page("notes/p.md", text)


def test_render_index_is_sorted_deterministic_and_keeps_its_title() -> None:
    pages = [Page("b.md", "Bee", "second"), Page("a/z.md", "Zed [x]", ""),
             Page("a.md", "Ay", "first")]
    text = render_index("Project wiki", pages)
    assert text == ("# Project wiki\n\n" + GENERATED_NOTE + "\n\n"
                    "- [Ay](<a.md>): first\n- [Zed \\[x\\]](<a/z.md>)\n- [Bee](<b.md>): second\n")
    assert render_index("Project wiki", list(reversed(pages))) == text
    assert index_title(text, "other") == "Project wiki"
    assert index_title(None, "Default") == "Default"
    assert render_index("W", []).endswith("- (no pages yet)\n")
