"""The failure-signature rule on real outputs of pytest, unittest, ruff, mypy and bash.

The outputs under tests/fixtures/checks/ were produced by running the tools on the
samples in tests/fixtures/checks/samples/ (tests/fixtures/checks/regenerate.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fractal.domain.checks.signature import (
    LINE_LIMIT,
    CheckSummary,
    count_results,
    failing_tests,
    first_error_line,
    normalise_line,
    summarise,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checks"
CASES = json.loads((FIXTURES / "cases.json").read_text())

PYTEST_IDS = ("test_calc.py::test_div_by_zero_returns_zero", "test_calc.py::test_mul",
              "test_calc.py::test_parse[x-0]", "test_calc.py::test_uses_broken")
UNITTEST_IDS = ("calc_unittest.CalcTest.test_div", "calc_unittest.CalcTest.test_mul",
                "calc_unittest.CalcTest.test_mul_by_one")


def _output(case: str) -> str:
    return (FIXTURES / f"{case}.txt").read_text()


@pytest.mark.parametrize(("case", "expected"), [
    ("pytest_q", CheckSummary(", ".join(PYTEST_IDS), 4, 3, PYTEST_IDS)),
    ("pytest_default", CheckSummary(", ".join(PYTEST_IDS), 4, 3, PYTEST_IDS)),
    ("pytest_verbose_tb_short", CheckSummary(", ".join(PYTEST_IDS), 4, 3, PYTEST_IDS)),
    ("pytest_collection_error",
     CheckSummary("test_broken_import.py", 1, 0, ("test_broken_import.py",))),
    ("pytest_pass", CheckSummary("", 0, 2)),
    ("unittest", CheckSummary(", ".join(UNITTEST_IDS), 3, 2, UNITTEST_IDS)),
    ("unittest_verbose", CheckSummary(", ".join(UNITTEST_IDS), 3, 2, UNITTEST_IDS)),
    ("ruff", CheckSummary("F401 [*] `os` imported but unused", 4, None)),
    ("ruff_concise", CheckSummary("<path>:N:N: F401 [*] `os` imported but unused", 4, None)),
    ("mypy", CheckSummary('<path>:N: error: Incompatible types in assignment (expression has '
                          'type "str", variable has type "int") [assignment]', 3, None)),
    ("shell_error", CheckSummary("ERROR: <path> is missing (expected after step N at N)",
                                 None, None)),
    ("shell_not_found", CheckSummary("check_notfound.sh: line N: frobnicate: command not found",
                                     None, None)),
])
def test_summary_of_real_output(case: str, expected: CheckSummary) -> None:
    assert summarise(_output(case), CASES[case]["exit_code"]) == expected


def test_every_fixture_has_a_case() -> None:
    outputs = {p.stem for p in FIXTURES.glob("*.txt")}
    assert outputs == set(CASES)


@pytest.mark.parametrize("case", ["pytest_q", "pytest_default", "unittest", "mypy",
                                  "ruff_concise", "shell_error"])
def test_signature_is_stable_when_only_noise_changes(case: str) -> None:
    """Addresses, timings, line numbers and temp paths move between runs; the signature
    must not."""
    text = _output(case)
    noisy = (text.replace("0x7f", "0x55").replace("0.03s", "1.27s").replace(":13", ":14")
             .replace("/tmp/fractal-check-samples", "/var/tmp/xyz").replace(":5:", ":6:")
             .replace("1796075625", "1796075999"))
    code = CASES[case]["exit_code"]
    assert summarise(noisy, code).signature == summarise(text, code).signature


def test_one_more_fix_changes_the_pytest_signature() -> None:
    text = _output("pytest_q")
    fixed = "\n".join(line for line in text.splitlines()
                      if not line.startswith("FAILED test_calc.py::test_mul "))
    assert summarise(fixed, 1).failing == tuple(i for i in PYTEST_IDS if not i.endswith("mul"))


@pytest.mark.parametrize(("line", "expected"), [
    ("E   RuntimeError: fixture exploded at 0x7fe37a14e010",
     "E RuntimeError: fixture exploded at <addr>"),
    ("/tmp/a/b/check.sh: line 12: foo: command not found",
     "<path>: line N: foo: command not found"),
    ("src/app.py:40:1: E302 expected 2 blank lines, found 1",
     "<path>:N:N: E302 expected N blank lines, found N"),
    ("main.c:7:3: error: 'x' undeclared", "<path>:N:N: error: 'x' undeclared"),
    ("2026-12-01T10:11:12Z failed to connect after 3.5s", "<time> failed to connect after Ns"),
    ("commit 3f9a2c41d7e8 is missing", "commit <hex> is missing"),
    ("  many    spaces\there  ", "many spaces here"),
    ("F401 stays F401; so do py311 and x2", "F401 stays F401; so do py311 and x2"),
    ("~/work/file.txt and ./rel/path and ../up", "<path> and <path> and <path>"),
])
def test_normalise_line(line: str, expected: str) -> None:
    assert normalise_line(line) == expected


@pytest.mark.parametrize(("output", "expected"), [
    ("starting\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
     "    boom()\nKeyError: 'token'\n", "KeyError: 'token'"),
    ("ok\nwarning: something\nfatal: not a git repository\nerror: later\n",
     "fatal: not a git repository"),
    ("all fine\nnothing to see\n", None),
    ("collecting\nE   assert 1 == 2\n", "E   assert 1 == 2"),
    ("ls: cannot access 'nope': No such file or directory\n",
     "ls: cannot access 'nope': No such file or directory"),
])
def test_first_error_line(output: str, expected: str | None) -> None:
    assert first_error_line(output) == expected


@pytest.mark.parametrize(("output", "code", "signature"), [
    ("", 3, "exit 3"),
    ("\n\n", 1, "exit 1"),
    ("step 1 done\nstep 2 done at 12:00\n", 2, "step N done at N:N"),
    ("ERROR: something broke\n", 0, ""),
])
def test_fallbacks(output: str, code: int, signature: str) -> None:
    assert summarise(output, code).signature == signature


@pytest.mark.parametrize(("output", "expected"), [
    ("===== 2 failed, 10 passed, 1 skipped in 3.21s =====", (2, 10)),
    ("1 failed, 1 passed, 2 errors in 0.50s", (3, 1)),
    ("=== 5 passed, 2 warnings in 1.00s (0:00:01) ===", (0, 5)),
    ("no tests ran in 0.01s", (0, 0)),
    ("Ran 4 tests in 0.010s\n\nOK (skipped=1)", (0, 3)),
    ("Ran 4 tests in 0.010s\n\nOK", (0, 4)),
    ("Ran 6 tests in 0.1s\n\nFAILED (failures=1, errors=2, skipped=1)", (3, 2)),
    ("Success: no issues found in 3 source files", (0, None)),
    ("All checks passed!", (0, None)),
    ("Found 1 error in 1 file (checked 2 source files)", (1, None)),
    ("Found 12 errors.\n[*] 3 fixable", (12, None)),
    ("make: *** [all] Error 2", (None, None)),
])
def test_count_results(output: str, expected: tuple[int | None, int | None]) -> None:
    assert count_results(output) == expected


@pytest.mark.parametrize(("output", "expected"), [
    ("FAILED tests/test_a.py::TestX::test_y[a b] - assert 0\n", ("tests/test_a.py::TestX::test_y[a b]",)),
    ("ERROR: build/x.json is missing (see log)\n", ()),  # a shell line, not unittest
    ("ERROR something else happened\n", ()),  # not a test id
    ("FAIL: test_it (mod.Case)\n", ("mod.Case.test_it",)),  # Python < 3.11 shape
    ("tests/t.py::test_b FAILED [ 50%]\ntests/t.py::test_a ERROR [100%]\n",
     ("tests/t.py::test_a", "tests/t.py::test_b")),
])
def test_failing_tests(output: str, expected: tuple[str, ...]) -> None:
    assert failing_tests(output) == expected


@pytest.mark.parametrize("output", [
    "x" * 2_000_000,                                   # one huge line, no error word
    "ERROR: " + "a/" * 500_000,                        # a huge path-like error line
    "FAILED " + "a" * 1_000_000 + " - " + "b" * 1_000_000,
], ids=["long-word", "long-path", "long-failed-line"])
def test_pathological_lines_stay_cheap(output: str) -> None:
    """Only the first LINE_LIMIT characters of a line are normalised: no quadratic regex
    work on a minified or flooded line."""
    started = time.monotonic()
    summary = summarise(output, 1)
    assert time.monotonic() - started < 2.0
    assert len(summary.signature) <= LINE_LIMIT
