"""Reading a git config file's text as git reads it, for what ``gitguard`` needs: the
filter, diff and merge drivers its section headers name, and the values of its ``path``
keys (the includes). No I/O: the caller reads the file (and follows the includes)."""

from __future__ import annotations

__all__ = ["DRIVER_KINDS", "parse_config"]

DRIVER_KINDS = frozenset({"filter", "diff", "merge"})
"""The sections whose subsection names a driver that runs a program."""

_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_BOM = "\ufeff"  # U+FEFF, the bytes EF BB BF decoded
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}


def parse_config(text: str) -> tuple[set[tuple[str, str]], list[str]]:
    """(the drivers every section header of ``text`` names, as (kind, name); the value of
    every ``path`` key, in any section) read as git reads a config file: a header and a
    key may share a line, a value may be partly quoted and continue past a backslash at
    the end of a line, escapes are undone, a comment starts at an unquoted ``#`` or ``;``.
    Following every ``path`` (not only ``include.path`` / ``includeIf.<cond>.path``) can
    only find more drivers, never fewer. A UTF-8 byte-order mark opening the text is
    skipped, as git skips it (read as part of the first line, it would hide a header
    there)."""
    names: set[tuple[str, str]] = set()
    paths: list[str] = []
    i, end = (1 if text.startswith(_BOM) else 0), len(text)
    while i < end:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "#;":
            i = _line_end(text, i)
        elif c == "[":
            close = _header_end(text, i + 1)
            driver = _driver(text[i + 1:close])
            if driver is not None:
                names.add(driver)
            i = close + 1
        elif c in _KEY_CHARS:
            start = i
            while i < end and text[i] in _KEY_CHARS:
                i += 1
            key = text[start:i].lower()
            while i < end and text[i] in " \t":
                i += 1
            if i < end and text[i] == "=":
                value, i = _value(text, i + 1)
                if key == "path":
                    paths.append(value)
        else:  # git refuses such a file; nothing on this line can name a driver
            i = _line_end(text, i)
    return names, paths


def _line_end(text: str, i: int) -> int:
    found = text.find("\n", i)
    return len(text) if found < 0 else found


def _header_end(text: str, i: int) -> int:
    """The index of the ``]`` closing a header whose text starts at ``i`` (a quoted
    subsection may hold ``]`` and escaped quotes); the line's end when there is none."""
    quoted = False
    while i < len(text) and text[i] != "\n":
        c = text[i]
        if c == "\\" and quoted:
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == "]" and not quoted:
            return i
        i += 1
    return i


def _driver(header: str) -> tuple[str, str] | None:
    """(kind, name) when a header's text (between the brackets) opens a filter, diff or
    merge driver's section: ``filter "x"`` (name kept as written) or ``filter.x`` (the
    old syntax, name lowercased as git does)."""
    head = header.strip()
    quote = head.find('"')
    if quote >= 0:
        kind = head[:quote].strip().lower()
        raw = head[quote + 1:].rstrip()
        raw = raw[:-1] if raw.endswith('"') else raw
        chars: list[str] = []
        k = 0
        while k < len(raw):  # a backslash keeps the next character as it is
            if raw[k] == "\\" and k + 1 < len(raw):
                k += 1
            chars.append(raw[k])
            k += 1
        name = "".join(chars)
        return (kind, name) if kind in DRIVER_KINDS else None
    kind, dot, name = head.partition(".")
    kind = kind.strip().lower()
    if not dot or kind not in DRIVER_KINDS:
        return None
    return kind, name.strip().lower()


def _value(text: str, i: int) -> tuple[str, int]:
    """A value starting at ``i`` (just after ``=``) as git reads it, and where it ends:
    leading and trailing unquoted blanks dropped, quotes removed, ``\\n`` ``\\t``
    ``\\b`` ``\\"`` ``\\\\`` undone, a backslash before a newline joining the next line."""
    out: list[str] = []
    quoted = False
    spaces = 0
    end = len(text)
    while i < end:
        c = text[i]
        if c == "\n" and not quoted:
            break
        if c in " \t" and not quoted:
            spaces += 1 if out else 0
            i += 1
            continue
        if c in "#;" and not quoted:
            i = _line_end(text, i)
            break
        out.append(" " * spaces)
        spaces = 0
        if c == '"':
            quoted = not quoted
        elif c == "\\" and i + 1 < end:
            i += 1
            nxt = text[i]
            if nxt == "\n":
                pass  # a continuation: the value goes on on the next line
            else:
                out.append(_ESCAPES.get(nxt, nxt))
        elif c != "\n":
            out.append(c)
        i += 1
    return "".join(out), i
