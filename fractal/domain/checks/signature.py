"""The failure signature of a check's output, and its failure/pass counts (docs/checks.md).

A signature is a short, stable string that stays the same when a check fails the same
way twice, and changes when the failure changes. The rule, first match wins:

1. **Named tests.** When the output names failing tests the way pytest or unittest
   report them, the signature is the sorted set of those test ids, joined by ``", "``:

   - pytest's short summary (``FAILED tests/test_a.py::test_x - msg``, ``ERROR test_b.py``)
     and its verbose lines (``tests/test_a.py::test_x FAILED [ 50%]``);
   - unittest's headers (``FAIL: test_x (pkg.mod.Case.test_x)``) and verbose lines
     (``test_x (pkg.mod.Case.test_x) ... ERROR``); before Python 3.11 the parentheses
     hold only the class, and the method name is appended.

2. **The first error-looking line**, normalised. A line looks like an error when it
   carries a location prefix (``file.py:12:``), starts with a lint code (``F401``) or
   pytest's ``E   `` marker, names an exception (``ValueError: ...``) or holds an error word (``error``,
   ``failed``, ``fatal``, ``not found``, ``no such file``, ``cannot``, ...). When that
   line opens a Python traceback, the exception line that ends the traceback is used
   instead. Normalising replaces timestamps with ``<time>``, ``0x`` addresses with
   ``<addr>``, long hex ids with ``<hex>``, paths with ``<path>`` and free-standing
   numbers with ``N`` (codes such as ``F401`` keep their digits), then collapses spaces.

3. Otherwise the last non-empty line, normalised; for empty output, ``exit <code>``.

A check that passed (exit 0) has the empty signature. Counts are read from the tools'
own summary lines (pytest, unittest, mypy, ruff); ``failures`` counts errors too; each
count is None when no summary line was recognised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass


def _pattern(text: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """``re.compile(text, flags)`` done on the first call, then kept: a supervisor that
    never summarises a check's output never compiles these."""
    return functools.cache(functools.partial(re.compile, text, flags))


__all__ = ["LINE_LIMIT", "CheckSummary", "count_results", "failing_tests", "first_error_line",
           "normalise_line", "summarise"]


@dataclass(frozen=True)
class CheckSummary:
    """What a check's output says: ``signature`` ("" when it passed), ``failures`` and
    ``passed`` counts (None when unknown), and the failing test ids it named (sorted)."""

    signature: str
    failures: int | None
    passed: int | None
    failing: tuple[str, ...] = ()


_PYTEST_SUMMARY = ("FAILED ", "ERROR ")  # "FAILED <id> - <message>" (the message optional)
_PYTEST_VERBOSE = _pattern(r"(?P<id>\S+::\S+) (?:FAILED|ERROR)\b.*")
_UNITTEST_HEADER = _pattern(r"(?:FAIL|ERROR): (?P<name>\w+) \((?P<where>[\w.]+)\)")
_UNITTEST_VERBOSE = _pattern(r"(?P<name>\w+) \((?P<where>[\w.]+)\) \.\.\. (?:FAIL|ERROR)")


def _pytest_id(text: str) -> str | None:
    """A pytest node id (``path::name[...]``) or a module path, else None."""
    text = text.strip()
    if "::" in text or text.endswith(".py"):
        return text
    return None


def failing_tests(output: str) -> tuple[str, ...]:
    """The sorted, unique test ids that ``output`` reports as failing (pytest or unittest
    style); empty when it names none."""
    found: set[str] = set()
    for raw in output.splitlines():
        line = raw.rstrip()
        if line.startswith(_PYTEST_SUMMARY):
            test_id = _pytest_id(line.split(" ", 1)[1].split(" - ", 1)[0])
            if test_id is not None:
                found.add(test_id)
            continue
        match = _PYTEST_VERBOSE().fullmatch(line)
        if match is not None:
            test_id = _pytest_id(match.group("id"))
            if test_id is not None:
                found.add(test_id)
            continue
        match = _UNITTEST_HEADER().fullmatch(line) or _UNITTEST_VERBOSE().fullmatch(line)
        if match is not None:
            name, where = match.group("name"), match.group("where")
            found.add(where if where.endswith(f".{name}") else f"{where}.{name}")
    return tuple(sorted(found))


_LOCATION = _pattern(r"\S+:\d+(?::\d+)?:(?:\s|$)")
_LINT_CODE = _pattern(r"[A-Z]{1,4}\d{2,4}\b")
_PYTEST_E = _pattern(r"E\s{2,}\S")  # pytest's explanation lines: "E   assert 1 == 2"
_EXCEPTION = _pattern(r"(?:[\w.]*\.)?\w*(?:Error|Exception|Exit|Interrupt)\b:?")
_ERROR_WORD = _pattern(
    r"\b(?:errors?|fail(?:ed|ure|ures|s)?|fatal|panic(?:ked)?|abort(?:ed)?|exception|"
    r"traceback|denied|not found|no such file|cannot|can't|unable to|segmentation fault|"
    r"timed out|missing)\b", re.IGNORECASE)
_TRACEBACK = "Traceback (most recent call last)"


def _looks_like_error(line: str) -> bool:
    stripped = line.strip()
    return bool(_LOCATION().match(stripped) or _LINT_CODE().match(stripped)
                or _PYTEST_E().match(stripped) or _EXCEPTION().match(stripped)
                or _ERROR_WORD().search(stripped))


def first_error_line(output: str) -> str | None:
    """The first error-looking line of ``output`` (stripped), or None.

    A traceback header is replaced by the first unindented line after it (the exception).
    """
    lines = output.splitlines()
    for index, raw in enumerate(lines):
        line = raw.strip()
        if not line or not _looks_like_error(line):
            continue
        if line.startswith(_TRACEBACK):
            for later in lines[index + 1:]:
                if later.strip() and not later[0].isspace():
                    return later.strip()
        return line
    return None


_TIME = _pattern(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_ADDRESS = _pattern(r"\b0x[0-9a-fA-F]+\b")
_HEX_ID = _pattern(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")
_PATH = _pattern(r"(?:~|\.{1,2})?(?:/[\w.@+~-]+)+/?|(?:[\w.@+~-]+/)+[\w.@+~-]*")
_FILE_AT = _pattern(r"\b[\w.@+~-]+\.[A-Za-z]\w*(?=:\d)")
_NUMBER = _pattern(r"(?<![A-Za-z_\d.])\d+(?:\.\d+)?")
_SPACES = _pattern(r"\s+")
LINE_LIMIT = 500
"""Characters of a line that are normalised (a longer line is cut first: bounded work)."""


def normalise_line(line: str) -> str:
    """``line`` (its first ``LINE_LIMIT`` characters) with timestamps, addresses, hex ids,
    paths and free-standing numbers replaced by placeholders, and runs of whitespace
    collapsed to one space."""
    text = _TIME().sub("<time>", line[:LINE_LIMIT])
    text = _ADDRESS().sub("<addr>", text)
    text = _HEX_ID().sub("<hex>", text)
    text = _PATH().sub("<path>", text)
    text = _FILE_AT().sub("<path>", text)
    text = _NUMBER().sub("N", text)
    return _SPACES().sub(" ", text).strip()


_PYTEST_TOTALS = _pattern(r"=*\s*(?P<body>(?:no tests ran|\d+ \w+)(?:, \d+ \w+)*) in "
                            r"[\d.]+s(?: \([\d:.]+\))?\s*=*")
_PYTEST_PART = _pattern(r"(\d+) (\w+)")
_UNITTEST_RAN = _pattern(r"Ran (\d+) tests? in ")
_UNITTEST_END = _pattern(r"(?P<verdict>OK|FAILED)(?: \((?P<body>[^)]*)\))?")
_MYPY_FOUND = _pattern(r"Found (\d+) errors? in \d+ files?\b.*")
_RUFF_FOUND = _pattern(r"Found (\d+) errors?\..*")
_CLEAN = _pattern(r"Success: no issues found\b.*|All checks passed!")


def _pytest_counts(line: str) -> tuple[int, int] | None:
    match = _PYTEST_TOTALS().fullmatch(line)
    if match is None:
        return None
    parts = {word: int(n) for n, word in _PYTEST_PART().findall(match.group("body"))}
    failures = parts.get("failed", 0) + parts.get("error", 0) + parts.get("errors", 0)
    return failures, parts.get("passed", 0)


def _unittest_counts(lines: list[str]) -> tuple[int, int] | None:
    ran: int | None = None
    for line in lines:
        match = _UNITTEST_RAN().match(line)
        if match is not None:
            ran = int(match.group(1))
            continue
        end = _UNITTEST_END().fullmatch(line)
        if ran is not None and end is not None:
            parts = dict(re.findall(r"(\w+)=(\d+)", end.group("body") or ""))
            failures = int(parts.get("failures", 0)) + int(parts.get("errors", 0))
            skipped = int(parts.get("skipped", 0)) + int(parts.get("expected failures", 0))
            return failures, max(0, ran - failures - skipped)
    return None


def count_results(output: str) -> tuple[int | None, int | None]:
    """(failures, passed) from the summary lines of pytest, unittest, mypy or ruff.

    pytest: ``3 failed, 3 passed, 1 error in 0.03s`` -> (4, 3); unittest: ``Ran 5 tests``
    with ``FAILED (failures=2, errors=1)`` -> (3, 2); mypy ``Found 3 errors in 1 file``
    and ruff ``Found 4 errors.`` -> (N, None); their clean messages -> (0, None).
    Unrecognised output -> (None, None).
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        counts = _pytest_counts(line)
        if counts is not None:
            return counts
    counts = _unittest_counts(lines)
    if counts is not None:
        return counts
    for line in reversed(lines):
        match = _MYPY_FOUND().fullmatch(line) or _RUFF_FOUND().fullmatch(line)
        if match is not None:
            return int(match.group(1)), None
        if _CLEAN().fullmatch(line):
            return 0, None
    return None, None


def summarise(output: str, exit_code: int) -> CheckSummary:
    """The signature and counts of a check that exited ``exit_code`` with ``output``
    (stdout and stderr merged). See the module docstring for the rule."""
    failures, passed = count_results(output)
    if exit_code == 0:
        return CheckSummary("", failures, passed)
    failing = failing_tests(output)
    if failing:
        return CheckSummary(", ".join(failing), failures, passed, failing)
    line = first_error_line(output)
    if line is None:
        line = next((ln for ln in reversed(output.splitlines()) if ln.strip()), None)
    signature = normalise_line(line) if line is not None else ""
    return CheckSummary(signature or f"exit {exit_code}", failures, passed)
