"""The flat ``---`` frontmatter block that may open a step file (docs/loop.md, "Step frontmatter").

Deliberately not YAML: one ``key: value`` per line, lower-case keys, non-empty values,
nothing nests, quotes are kept literally, other lines are ignored, and the first
occurrence of a key wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["STEP_KEYS", "Frontmatter", "frontmatter_warnings", "is_true", "normalise_newlines",
           "parse_frontmatter"]

_FENCE = re.compile(r"---[ \t]*")
_FIELD = re.compile(r"([a-z][a-z0-9_]*):(?:[ \t](.*))?")


@dataclass(frozen=True)
class Frontmatter:
    """A parsed step file.

    ``fields`` maps each key to its stripped value (read-only); ``body`` is the text after the
    closing fence (the whole normalised text when there is no block); ``has_block`` says
    whether a complete ``---`` ... ``---`` block was found.
    """

    fields: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    body: str = ""
    has_block: bool = False


def normalise_newlines(text: str) -> str:
    """Drop one leading UTF-8 BOM (U+FEFF) and turn CRLF and lone CR into LF."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def parse_frontmatter(text: str) -> Frontmatter:
    """Split ``text`` into its frontmatter fields and body.

    The text is normalised first (``normalise_newlines``). A block opens only when the very
    first line is ``---`` (trailing spaces or tabs tolerated) and closes at the next line that
    is ``---`` (same tolerance). Inside it, a line ``key: value`` with key ``[a-z][a-z0-9_]*``
    at the start of the line, a colon, whitespace and a non-empty value is a field; the value
    is stripped and kept literally (quotes included); the first occurrence of a key wins;
    every other line (indented, upper-case key, empty value, comments) is ignored. Without a
    closing fence there is no frontmatter: ``fields`` is empty and ``body`` is the whole
    normalised text. Never raises.
    """
    normalised = normalise_newlines(text)
    lines = normalised.split("\n")
    if not lines or _FENCE.fullmatch(lines[0]) is None:
        return Frontmatter(body=normalised)
    for index in range(1, len(lines)):
        if _FENCE.fullmatch(lines[index]) is not None:
            return Frontmatter(
                fields=MappingProxyType(_fields(lines[1:index])),
                body="\n".join(lines[index + 1:]),
                has_block=True,
            )
    return Frontmatter(body=normalised)


def _fields(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines:
        match = _FIELD.fullmatch(line)
        if match is None:
            continue
        key, value = match.group(1), (match.group(2) or "").strip()
        if value and key not in found:
            found[key] = value
    return found


def is_true(value: str | None) -> bool:
    """Return True only for exactly ``"true"``.

    ``None``, ``"yes"``, ``"True"``, ``"1"`` and every other value are False.
    """
    return value == "true"


STEP_KEYS = frozenset({"requires_approval", "agent", "provider", "model", "effort", "timeout",
                       "detached", "check", "on_fail", "pass_score", "fix", "max_fix_rounds",
                       "on_fail_final", "wait", "pool"})
"""Every key a step's frontmatter may set: the gate keys are docs/checks.md's, ``wait:
children`` (hold the loop before the step until every child settled) docs/tree.md's,
``pool: dispatch`` (the worker pool's dispatcher step) docs/pool.md's."""

_LOOSE = re.compile(r"[ \t]*[\"']?([A-Za-z][A-Za-z0-9_-]*)[\"']?[ \t]*:(.*)")
_FLAGS = ("requires_approval", "detached")


def frontmatter_warnings(text: str, known: frozenset[str] = STEP_KEYS) -> list[str]:
    """Likely mistakes the grammar silently ignores, one sentence each (never raises).

    The grammar itself is unchanged (``parse_frontmatter``); these only explain it:
    a ``---`` first line that never closes (the whole file becomes the prompt), a line
    naming a known key in a shape the grammar ignores (``Timeout: 1s``,
    ``requires_approval:true``, an indented or quoted key), unknown keys, empty values,
    and a ``requires_approval`` or ``detached`` value other than ``true``/``false``
    (which means false).
    """
    lines = normalise_newlines(text).split("\n")
    if not lines or _FENCE.fullmatch(lines[0]) is None:
        return []
    closing = next((i for i in range(1, len(lines)) if _FENCE.fullmatch(lines[i])), None)
    if closing is None:
        return ["the first line opens a --- block that never closes, so no frontmatter was "
                "read and the whole file, block included, is the prompt"]
    out: list[str] = []
    for line in lines[1:closing]:
        strict = _FIELD.fullmatch(line)
        if strict is None:
            loose = _LOOSE.fullmatch(line)
            if loose is not None and loose.group(1).lower() in known:
                key = loose.group(1).lower()
                out.append(f"{line.strip()[:80]!r} is ignored: write it as '{key}: value' "
                           "(lower-case key at the start of the line, a space after the colon)")
            continue
        key, value = strict.group(1), (strict.group(2) or "").strip()
        if key not in known:
            out.append(f"unknown key '{key}:' is ignored (known: {', '.join(sorted(known))})")
        elif not value:
            out.append(f"'{key}:' has no value and is ignored")
        elif key in _FLAGS and value not in ("true", "false"):
            out.append(f"{key}: {value[:40]!r} means false: only 'true' turns it on")
    return out
