"""``domain.termtext.terminal_text``: what a node wrote, as it may reach a terminal."""

from __future__ import annotations

import pytest

from fractal.domain.termtext import terminal_text

CASES = [
    ("plain text", "plain text"),
    ("window title (OSC 0, BEL)", "a\x1b]0;pwned\x07b", "ab"),
    ("clipboard (OSC 52, ST)", "x\x1b]52;c;ZXZpbA==\x1b\\y", "xy"),
    ("colour (CSI)", "red \x1b[31mR\x1b[0m", "red R"),
    ("clear screen", "a\x1b[2Jb", "ab"),
    ("8-bit CSI", "\x9b31mz", "z"),
    ("8-bit OSC to ST", "a\x9d0;t\x9cb", "ab"),
    ("DCS", "\x1bPdcs\x1b\\ok", "ok"),
    ("unterminated OSC eats the rest", "a\x1b]0;never ends", "a"),
    ("two-character ESC", "esc\x1bc!", "esc!"),
    ("lone ESC at the end", "tail\x1b", "tail"),
    ("CRLF becomes LF", "a\r\nb", "a\nb"),
    ("lone CR removed", "abc\rX", "abcX"),
    ("newlines and tabs stay", "one\n\ttwo\n", "one\n\ttwo\n"),
    ("other C0 controls", "a\x00b\x07c\x08d\x7fe", "abcde"),
    ("bidi overrides", "bidi\u202eevil\u2066x\u2069", "bidievilx"),
    ("unicode stays", "naïve · 日本 ✓", "naïve · 日本 ✓"),
]


@pytest.mark.parametrize(("text", "expected"), [(c[1], c[-1]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_terminal_text(text: str, expected: str) -> None:
    assert terminal_text(text) == expected


def test_clean_text_is_returned_as_is() -> None:
    text = "nothing to strip"
    assert terminal_text(text) is text
