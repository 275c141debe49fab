"""Durations: parse rules and refusals, compact formatting (seed: Time limits)."""

from __future__ import annotations

import pytest

from fractal.domain.durations import format_duration, parse_duration
from fractal.domain.errors import InvalidValue


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30),
    ("10m", 600),
    ("1h", 3600),
    ("2d", 172800),
    ("1.5h", 5400),
    ("0.5m", 30),
    (".5m", 30),
    ("1.9s", 1),  # truncated, not rounded
    ("0.1h", 360),  # exact decimal arithmetic, no float drift
    ("1.15m", 69),
    ("  10m \n", 600),  # surrounding whitespace stripped
    ("007s", 7),
    ("1.0000001s", 1),
])
def test_parse_accepts(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "fragment"), [
    ("10", "needs a unit (s, m, h or d), e.g. 10m"),
    ("1.5", "needs a unit"),
    ("", "empty duration"),
    ("   ", "empty duration"),
    ("-5m", "must not be negative"),
    ("-5", "must not be negative"),
    ("10x", 'unknown unit "x"'),
    ("10ms", 'unknown unit "ms"'),
    ("10min", 'unknown unit "min"'),
    ("10M", "units are lower-case"),
    ("10H", "units are lower-case"),
    ("10 m", "must not contain spaces"),
    ("1 0m", "must not contain spaces"),
    ("inf", "is not a duration"),
    ("infs", "is not a duration"),
    ("nan", "is not a duration"),
    ("nanm", "is not a duration"),
    ("1e3s", "is not a duration"),
    ("m", "is not a duration"),
    ("+5m", "is not a duration"),
    ("1.s", "is not a duration"),
    ("0s", "shorter than one second"),
    ("0.5s", "shorter than one second"),
    ("0.001m", "shorter than one second"),
    ("0d", "shorter than one second"),
    ("99999999999999999999d", "too long"),
])
def test_parse_refuses_with_key_text_and_rule(text: str, fragment: str) -> None:
    with pytest.raises(InvalidValue) as info:
        parse_duration(text, "step_timeout")
    message = str(info.value)
    assert message.startswith("step_timeout: ")
    assert fragment in message
    if text.strip():
        assert f'"{text}"' in message


def test_bare_number_message_is_exact() -> None:
    with pytest.raises(InvalidValue, match=r'^step_timeout: "10" needs a unit \(s, m, h or d\), '
                                           r"e\.g\. 10m$"):
        parse_duration("10", "step_timeout")


def test_default_key_name() -> None:
    with pytest.raises(InvalidValue, match=r"^duration: "):
        parse_duration("10")


@pytest.mark.parametrize(("seconds", "text"), [
    (172800, "2d"),
    (86400, "1d"),
    (3600, "1h"),
    (7200, "2h"),
    (5400, "90m"),
    (600, "10m"),
    (60, "1m"),
    (90, "90s"),
    (1, "1s"),
    (86401, "86401s"),
    (90000, "25h"),
    (0, "0s"),
    (0.4, "0s"),
    (59.9, "59s"),
    (3600.0, "1h"),
    (-60, "-1m"),
])
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [1, 59, 60, 61, 3599, 3600, 5400, 86399, 86400, 172800, 90061])
def test_format_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds
