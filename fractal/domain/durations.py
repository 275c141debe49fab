"""Durations as written in config and frontmatter: ``<number><unit>`` <-> whole seconds.

Every duration is a number followed by ``s``, ``m``, ``h`` or ``d``;
bare numbers are refused, values truncate to whole seconds, and a duration that truncates
to zero is refused.
"""

from __future__ import annotations

import re
from decimal import Decimal

from fractal.domain.errors import InvalidValue

__all__ = ["UNIT_SECONDS", "format_duration", "parse_duration"]

UNIT_SECONDS: dict[str, int] = {"s": 1, "m": 60, "h": 3600, "d": 86400}
"""Seconds per unit letter, largest last."""

# Cap so that every deadline built from a duration stays an exact float and fits SQLite's INT.
_MAX_SECONDS = 2**53

_NUMBER = r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_DURATION = re.compile(rf"({_NUMBER})([smhd])")
_BARE_NUMBER = re.compile(rf"[+-]?{_NUMBER}")
_NUMBER_THEN_WORD = re.compile(rf"({_NUMBER})([A-Za-z]+)")
_EXAMPLE = "e.g. 10m"


def _refuse(key: str, text: str, rule: str) -> InvalidValue:
    return InvalidValue(f'{key}: "{text}" {rule}')


def parse_duration(text: str, key: str = "duration") -> int:
    """Parse ``"30s"``, ``"10m"``, ``"1.5h"`` or ``"2d"`` into whole seconds.

    ``text`` may carry surrounding whitespace; ``key`` names the setting in error messages.
    Returns a positive ``int`` number of seconds, truncated (``"1.9s"`` -> 1).

    Raises ``InvalidValue`` naming ``key``, the text and the broken rule when the text is
    empty, a bare number, negative, has spaces inside, an unknown or upper-case unit, is not
    a finite number, truncates to zero seconds, or exceeds 2**53 seconds.
    """
    stripped = text.strip()
    if not stripped:
        raise InvalidValue(f"{key}: empty duration; write <number><unit> with unit s, m, h or d, "
                           f"{_EXAMPLE}")
    match = _DURATION.fullmatch(stripped)
    if match is None:
        raise _refuse(key, text, _why_not(stripped))
    number, unit = match.groups()
    seconds = int(Decimal(number) * UNIT_SECONDS[unit])
    if seconds < 1:
        raise _refuse(key, text, "is shorter than one second after truncation to whole seconds; "
                                 "use at least 1s")
    if seconds > _MAX_SECONDS:
        raise _refuse(key, text, f"is too long (over {_MAX_SECONDS} seconds)")
    return seconds


def _why_not(text: str) -> str:
    """Explain why ``text`` (already stripped, non-empty) is not a duration."""
    if any(ch.isspace() for ch in text):
        return f"must not contain spaces; write the number and unit together, {_EXAMPLE}"
    if text.startswith("-"):
        return "must not be negative"
    if _BARE_NUMBER.fullmatch(text):
        return f"needs a unit (s, m, h or d), {_EXAMPLE}"
    word = _NUMBER_THEN_WORD.fullmatch(text)
    if word is not None:
        unit = word.group(2)
        if unit.lower() in UNIT_SECONDS:
            return f'has unit "{unit}"; units are lower-case: s, m, h or d, {_EXAMPLE}'
        return f'has unknown unit "{unit}"; use s, m, h or d, {_EXAMPLE}'
    return f"is not a duration; write <number><unit> with unit s, m, h or d, {_EXAMPLE}"


def format_duration(seconds: float) -> str:
    """Render ``seconds`` compactly in the largest unit that divides it exactly.

    ``172800`` -> ``"2d"``, ``3600`` -> ``"1h"``, ``5400`` -> ``"90m"``, ``90`` -> ``"90s"``.
    Fractions are truncated toward zero first (``0.4`` -> ``"0s"``), so the output of any whole
    positive number of seconds round-trips through ``parse_duration``. Negative values keep
    their sign (display only).
    """
    whole = int(seconds)
    sign = "-" if whole < 0 else ""
    whole = abs(whole)
    if whole == 0:
        return "0s"
    for unit in ("d", "h", "m"):
        size = UNIT_SECONDS[unit]
        if whole % size == 0:
            return f"{sign}{whole // size}{unit}"
    return f"{sign}{whole}s"
