"""The database's one timestamp format: ISO-8601 UTC, milliseconds, a ``Z`` suffix.

Every instant the store writes looks like ``2026-01-01T00:00:00.123Z``. The format
sorts lexically in time order and SQLite's ``julianday()`` reads it, so durations are
derived from start and end instants and never stored. Stdlib only: the fast
read path imports this module.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fractal.errors import InvalidValue

__all__ = ["format_ts", "parse_ts", "to_epoch", "utc_now"]


def format_ts(moment: datetime) -> str:
    """Render an aware datetime as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC.

    Sub-millisecond digits are truncated, not rounded, so the text never names a
    later instant than ``moment``. Raises InvalidValue for a naive datetime, whose
    zone would be a guess.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidValue(f"timestamp {moment!r} has no time zone; pass an aware datetime")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def utc_now() -> str:
    """The current instant in the database format (reads the wall clock)."""
    return format_ts(datetime.now(UTC))


def parse_ts(text: str) -> datetime:
    """Parse a stored timestamp into an aware UTC datetime.

    Accepts the canonical form and the looser ISO-8601 variants Python reads
    (no fraction, ``+00:00`` instead of ``Z``); a value without a zone is taken as
    UTC, which is what SQLite's ``strftime`` writes. Raises InvalidValue when
    ``text`` is not an ISO-8601 instant.
    """
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidValue(
            f"timestamp {text!r} is not ISO-8601 UTC; expected e.g. 2026-01-01T00:00:00.000Z"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def to_epoch(text: str) -> float:
    """A stored timestamp as Unix epoch seconds (float, millisecond resolution)."""
    if text.endswith("Z"):  # the canonical form: no zone arithmetic needed
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            pass
    return parse_ts(text).timestamp()
