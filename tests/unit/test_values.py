"""domain/values.by_type: NamedTuples that compare like frozen dataclasses."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from fractal.agents.base import NoticeEvent, TextEvent
from fractal.domain.values import by_type


@by_type
class Pair(NamedTuple):
    a: int
    b: str = ""


@by_type
class Other(NamedTuple):
    a: int
    b: str = ""


@pytest.mark.parametrize(("left", "right", "equal"), [
    (Pair(1, "x"), Pair(1, "x"), True),
    (Pair(1, "x"), Pair(1, "y"), False),
    (Pair(1, "x"), Other(1, "x"), False),
    (Pair(1, "x"), (1, "x"), False),
    (TextEvent("hi"), NoticeEvent("hi"), False),
    (TextEvent("hi"), TextEvent("hi"), True),
])
def test_equal_only_within_the_class(left: object, right: object, equal: bool) -> None:
    assert (left == right) is equal
    assert (left != right) is not equal


def test_hash_follows_equality_and_values_are_immutable() -> None:
    assert hash(Pair(1, "x")) == hash(Pair(1, "x"))
    assert len({Pair(1, "x"), Pair(1, "x"), Other(1, "x")}) == 2
    with pytest.raises(AttributeError):
        Pair(1).a = 2  # type: ignore[misc]
    assert Pair(1)._replace(b="y") == Pair(1, "y")
