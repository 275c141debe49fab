"""The box-drawn tree and the status marks (fractal/domain/views/treedraw.py)."""

from __future__ import annotations

import pytest

from fractal.domain.views.treedraw import ASCII, UNICODE, draw_tree, glyph


def _drawn(branches: list[str], ascii_only: bool = False) -> list[str]:
    return [f"{line.prefix}{line.branch}"
            for line in draw_tree(branches, ASCII if ascii_only else UNICODE)]


@pytest.mark.parametrize(("branches", "expected"), [
    (["main", "main.a", "main.b"], ["main", "├── main.a", "└── main.b"]),
    (["main", "main.b", "main.a", "main.a.x", "main.a.y"],
     ["main", "├── main.a", "│   ├── main.a.x", "│   └── main.a.y", "└── main.b"]),
    (["main", "main.a", "main.a.x.z"], ["main", "└── main.a", "    └── main.a.x.z"]),
    (["main.a", "main.b"], ["main.a", "main.b"]),  # no common listed ancestor: two tops
    ([], []),
], ids=["siblings", "nested", "gap-hangs-under-nearest", "forest", "empty"])
def test_draw_tree(branches: list[str], expected: list[str]) -> None:
    assert _drawn(branches) == expected


def test_ascii_connectors() -> None:
    assert _drawn(["main", "main.a", "main.a.x", "main.b"], ascii_only=True) == [
        "main", "|-- main.a", "|   `-- main.a.x", "`-- main.b"]


def test_depths() -> None:
    assert [line.depth for line in draw_tree(["main", "main.a", "main.a.x"])] == [0, 1, 2]


@pytest.mark.parametrize(("status", "uni", "asc"), [
    ("active", "●", "*"), ("paused", "‖", "="), ("idle", "○", "o"),
    ("completed", "✓", "+"), ("stopped", "■", "#"), ("exited", "✗", "x"),
    ("killed", "✕", "k"), ("retired", "·", "-"), ("something-new", "?", "?"),
])
def test_glyphs(status: str, uni: str, asc: str) -> None:
    assert glyph(status, UNICODE) == uni
    assert glyph(status, ASCII) == asc
    assert glyph(status, ASCII).isascii()
