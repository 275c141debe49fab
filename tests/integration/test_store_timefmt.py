"""The stored timestamp format (pure apart from ``utc_now``; kept beside the store tests)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from fractal.errors import InvalidValue
from fractal.store.timefmt import format_ts, parse_ts, to_epoch, utc_now

CANONICAL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_utc_now_is_canonical_and_current() -> None:
    now = utc_now()
    assert CANONICAL.match(now)
    assert abs(to_epoch(now) - datetime.now(UTC).timestamp()) < 5


@pytest.mark.parametrize(("moment", "text"), [
    (datetime(2026, 1, 1, tzinfo=UTC), "2026-01-01T00:00:00.000Z"),
    (datetime(2026, 1, 1, 0, 0, 0, 123999, tzinfo=UTC), "2026-01-01T00:00:00.123Z"),
    (datetime(2026, 1, 1, 2, 30, tzinfo=timezone(timedelta(hours=2))),
     "2026-01-01T00:30:00.000Z"),
])
def test_format_ts(moment: datetime, text: str) -> None:
    assert format_ts(moment) == text


def test_format_ts_refuses_a_naive_datetime() -> None:
    with pytest.raises(InvalidValue, match="time zone"):
        format_ts(datetime(2026, 1, 1))


@pytest.mark.parametrize(("text", "epoch"), [
    ("1970-01-01T00:00:00.000Z", 0.0),
    ("1970-01-01T00:00:01.250Z", 1.25),
    ("1970-01-01T00:00:01Z", 1.0),
    ("1970-01-01T01:00:00+01:00", 0.0),
    ("1970-01-01 00:00:02.500", 2.5),  # SQLite strftime style, no zone: UTC
])
def test_parse_and_epoch(text: str, epoch: float) -> None:
    assert to_epoch(text) == epoch
    assert parse_ts(text).tzinfo is not None


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z"])
def test_parse_refuses_garbage(text: str) -> None:
    with pytest.raises(InvalidValue, match="ISO-8601"):
        parse_ts(text)


def test_round_trip() -> None:
    text = "2026-07-28T12:34:56.789Z"
    assert format_ts(parse_ts(text)) == text
