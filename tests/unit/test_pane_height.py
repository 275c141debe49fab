"""When a dashboard pane's new text needs no new layout (``render.same_height``)."""

from __future__ import annotations

import pytest

from fractal.tui.render import same_height


def _key(text: str) -> tuple[str, list[object], str]:
    return (text, [], "")


@pytest.mark.parametrize(("before", "after", "width", "same"), [
    (_key("a\nb"), _key("c\nd"), 10, True),  # as many lines, none wrapped
    (_key("a\nb"), _key("a\nb\nc"), 10, False),  # one line more
    (_key("a\nb"), _key("a"), 10, False),  # one line fewer
    (_key("short"), _key("x" * 10), 10, False),  # the new line wraps at 10 cells
    (_key("x" * 12), _key("short"), 10, False),  # the old one wrapped
    (_key("界界"), _key("ab"), 4, False),  # wide characters count two cells
    (None, _key("a"), 10, False),  # nothing shown yet
    ("plain", _key("a"), 10, False),  # not a text key
    (_key("a"), _key("b"), 0, False),  # not laid out yet
])
def test_same_height(before: object, after: object, width: int, same: bool) -> None:
    assert same_height(before, after, width) is same
