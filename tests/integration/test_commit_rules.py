"""The pure rules of ``fractal commit``, table-driven: scope coverage, the roots a scoped node
may change, subjects, message refusals. (No git here; the pipeline tests live beside.)"""

from __future__ import annotations

import pytest

from fractal.errors import InvalidValue
from fractal.lifecycle.commit import compose_subject, validate_message
from fractal.workspace.commit_scope import allowed_roots, covered, out_of_scope
from fractal.workspace.commit_types import listing


@pytest.mark.parametrize(("path", "roots", "expected"), [
    ("src/a.py", ("src",), True),
    ("src", ("src",), True),
    ("src/", ("src",), True),
    ("srcs/a.py", ("src",), False),
    ("lib/src/a.py", ("src",), False),
    ("a/b/c.py", ("a/b",), True),
    ("a/bc/c.py", ("a/b",), False),
    ("wiki/page.md", ("src", "wiki"), True),
    (".fractal/main.a/plans/p.md", (".fractal/main.a",), True),
    (".fractal/main.ab/x", (".fractal/main.a",), False),
])
def test_covered(path: str, roots: tuple[str, ...], expected: bool) -> None:
    assert covered(path, roots) is expected


@pytest.mark.parametrize(("scope", "node_dir", "expected"), [
    ((), ".fractal/main.a", None),
    (("src",), ".fractal/main.a", ("src", ".fractal/main.a", "wiki")),
    (("src", "wiki"), ".fractal/main.a/", ("src", "wiki", ".fractal/main.a")),
])
def test_allowed_roots(scope: tuple[str, ...], node_dir: str,
                       expected: tuple[str, ...] | None) -> None:
    assert allowed_roots(scope, node_dir) == expected


def test_out_of_scope_keeps_order_and_unscoped_allows_all() -> None:
    paths = ["z.txt", "src/a.py", "a.txt"]
    assert out_of_scope(paths, ("src",)) == ["z.txt", "a.txt"]
    assert out_of_scope(paths, None) == []


@pytest.mark.parametrize(("init", "run_id", "iteration", "expected"), [
    (False, 4, 2, "main.a: iteration 4.2 (add x)"),
    (False, 4, None, "main.a: iteration 4.0 (add x)"),
    (True, None, None, "main.a: init (add x)"),
    (True, 4, 2, "main.a: init (add x)"),
])
def test_compose_subject(init: bool, run_id: int | None, iteration: int | None,
                         expected: str) -> None:
    assert compose_subject("main.a", "add x", init=init, run_id=run_id,
                           iteration=iteration) == expected


@pytest.mark.parametrize("message", [None, "", "  ", "main.a add x", "MAIN.A: x",
                                     "iteration 2", "Iteration: x", "a\nb", "tab\there"])
def test_refused_messages(message: str | None) -> None:
    with pytest.raises(InvalidValue):
        validate_message(message, "main.a")


@pytest.mark.parametrize(("message", "expected"), [
    ("add x", "add x"), ("  add x  ", "add x"), ("iterations of the parser", None),
    ("fix main.a's config", "fix main.a's config"), ("réparer l'accent", "réparer l'accent"),
])
def test_accepted_messages(message: str, expected: str | None) -> None:
    assert validate_message(message, "main.a") == (expected or message)


def test_listing_caps() -> None:
    assert listing(["a", "b"]) == "a, b"
    assert listing([str(i) for i in range(25)], cap=3) == "0, 1, 2 ... and 22 more"
