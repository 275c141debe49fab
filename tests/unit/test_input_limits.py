"""Hostile input is refused with a reason, never an internal error: JSON items nested
past the parser's depth, a radio body over its cap."""

from __future__ import annotations

import pytest

from fractal.domain.errors import InvalidValue
from fractal.domain.pool import parse_items
from fractal.domain.radio import MAX_BODY_BYTES, check_body

DEEP = 100_000


@pytest.mark.parametrize("text", [
    pytest.param("[" * DEEP + "]" * DEEP, id="array"),
    pytest.param('{"id": "a", "input": ' + "[" * DEEP + "]" * DEEP + "}", id="json-lines"),
])
def test_items_nested_too_deeply_are_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"nested too deeply|is not JSON"):
        parse_items(text)


@pytest.mark.parametrize(("body", "ok"), [
    ("", True),
    ("x" * MAX_BODY_BYTES, True),
    ("x" * (MAX_BODY_BYTES + 1), False),
    ("é" * (MAX_BODY_BYTES // 2), True),  # two bytes each: exactly the cap
    ("é" * (MAX_BODY_BYTES // 2 + 1), False),
])
def test_radio_body_cap(body: str, ok: bool) -> None:
    if ok:
        assert check_body(body) == body
    else:
        with pytest.raises(InvalidValue, match=r"over the radio's cap of 65536 \(64 KiB\)"):
            check_body(body)



def test_a_body_cut_short_at_the_cap_is_refused_as_more_than_the_cap() -> None:
    """Read only up to one past the cap (standard input), its size is unknown: the
    refusal says "more than" the cap rather than where reading stopped."""
    with pytest.raises(InvalidValue, match=r"^the message body is more than 65536 bytes, "
                                           r"over the radio's cap"):
        check_body("x" * (MAX_BODY_BYTES + 1), whole=False)
    with pytest.raises(InvalidValue, match=r"^the message body is 65537 bytes, over"):
        check_body("x" * (MAX_BODY_BYTES + 1))


@pytest.mark.parametrize(("reason", "plain"), [
    ("exit 1; retry", "exit 1"),
    ("retry", ""),
    ("exit 1; retry; unpriced", "exit 1; unpriced"),
    ("exit 1", "exit 1"),
    ("", ""),
    ("retrying the parse failed", "retrying the parse failed"),
])
def test_an_iterations_reason_drops_the_retry_marker(reason: str, plain: str) -> None:
    from fractal.domain.outcome import retry_reason, without_retry

    assert without_retry(reason) == plain
    assert without_retry(retry_reason(plain)) == plain


@pytest.mark.parametrize(("typed", "echoed"), [
    ("lexr", "no node found for 'lexr'; known nodes: main.lexer"),
    ("x" * 80, f"no node found for {'x' * 80!r}; known nodes"),
    ("y" * 100_000, f"no node found for {'y' * 80!r}... (100000 characters); known nodes"),
])
def test_an_unknown_node_name_is_echoed_cut(typed: str, echoed: str) -> None:
    from pathlib import Path

    from fractal.errors import NodeNotFound
    from fractal.tree import Tree, resolve_node

    with pytest.raises(NodeNotFound) as refused:
        resolve_node(typed, ["main.lexer"], Tree(repo=Path("/nonexistent"), root="main"))
    assert str(refused.value).startswith(echoed)
    assert len(str(refused.value)) < 300


@pytest.mark.parametrize(("name", "ok"), [
    ("a", True), ("A_1", True), ("x" * 64, True), ("x" * 65, False),
    ("a\n", False), ("\na", False), ("a b", False), ("a.b", False), ("", False),
    ("a\x1b", False), ("é", False),
])
def test_node_names_are_checked_whole(name: str, ok: bool) -> None:
    from fractal.errors import InvalidValue as Refused
    from fractal.tree import validate_name

    if ok:
        assert validate_name(name) == name
    else:
        with pytest.raises(Refused, match="invalid node name"):
            validate_name(name)
