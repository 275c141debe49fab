"""Small readers shared by the JSON-lines stream parsers (claude, codex).

Agent output is untrusted: every helper accepts any JSON value and returns a typed value
or a neutral default, never raising on odd shapes.
"""

from __future__ import annotations

import json
import math

from fractal.agents.base import TextEvent, sanitize

__all__ = ["PREVIEW_LINES", "json_object", "num", "preview", "short", "text", "whole"]

PREVIEW_LINES = 4  # lines of a tool's output shown in the pane
SHORT = 300  # characters of a one-line detail


def json_object(line: str) -> dict[str, object] | None:
    """The JSON object on ``line``, or None when the line is not one."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        data = json.loads(stripped)
    except (ValueError, RecursionError):  # nested past the parser's depth: not one
        return None
    return data if isinstance(data, dict) else None


def text(value: object) -> str:
    """``value`` when it is a string (sanitised), else ``""``."""
    return sanitize(value) if isinstance(value, str) else ""


def whole(value: object) -> int | None:
    """``value`` as a non-negative int when it is a whole JSON number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    return int(value) if value >= 0 else None


def num(value: object) -> float | None:
    """``value`` as a finite non-negative float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) and result >= 0 else None


def short(value: str) -> str:
    """The first line of ``value``, capped at SHORT characters."""
    first = value.strip().splitlines()[0] if value.strip() else ""
    return first if len(first) <= SHORT else first[:SHORT - 1] + "…"


def preview(output: str, prefix: str = "    ") -> list[TextEvent]:
    """Up to PREVIEW_LINES lines of a tool's ``output`` as indented TextEvents, with a count
    of the lines left out."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    events = [TextEvent(prefix + short(ln)) for ln in lines[:PREVIEW_LINES]]
    if len(lines) > PREVIEW_LINES:
        events.append(TextEvent(f"{prefix}… ({len(lines) - PREVIEW_LINES} more lines)"))
    return events
