"""Provider outages (domain.outage): which failures are one, the doubling back-off and its
cap, the shared row's decision, the wording; and the command protocol's ``api_error``."""

from __future__ import annotations

import calendar

import pytest

from fractal.agents.base import ResultEvent
from fractal.agents.command import CommandParser
from fractal.domain.agent_errors import classify_api_error
from fractal.domain.outage import (
    OUTAGE_PROBE_STALE,
    OutageAction,
    OutageRow,
    OutageState,
    cut_short_hint,
    decide_outage,
    is_outage,
    outage_backoff,
    outage_detail,
    outage_label,
    outage_over_notice,
)


@pytest.mark.parametrize(("attempt", "first", "cap", "seconds"), [
    (1, 30, 1800, 30.0),
    (2, 30, 1800, 60.0),
    (3, 30, 1800, 120.0),
    (6, 30, 1800, 960.0),
    (7, 30, 1800, 1800.0),  # 1920 capped
    (50, 30, 1800, 1800.0),
    (10_000, 30, 1800, 1800.0),  # no overflow however long the night
    (0, 30, 1800, 30.0),  # below 1 counts as 1
    (1, 5, 1800, 5.0),
    (4, 5, 1800, 40.0),
    (1, 60, 20, 20.0),  # a cap below the first wait caps it too
])
def test_the_back_off_doubles_up_to_its_cap(attempt: int, first: int, cap: int,
                                            seconds: float) -> None:
    assert outage_backoff(attempt, first, cap) == seconds


@pytest.mark.parametrize(("status", "hint", "message", "outage"), [
    (529, None, "", True),
    (503, None, "", True),
    (500, None, "API Error: 500 mock: scripted HTTP 500", True),
    (502, None, "", True),
    (429, None, "Request rejected (429)", True),  # a rate limit that is not a usage window
    (None, None, "API Error: Unable to connect to API (ConnectionRefused)", True),
    (None, None, "API Error: Unable to connect to API (ECONNRESET)", True),
    (None, None, "getaddrinfo ENOTFOUND api.example.com", True),  # DNS
    (None, None, "error sending request for url: dns error: failed to lookup address", True),
    (None, None, "We’re currently experiencing high demand", True),
    (408, None, "", True),
    (401, None, "", False),
    (403, None, "", False),
    (400, None, "", False),
    (None, "invalid_request_error", "", False),
    (None, None, "tests failed", False),
])
def test_which_api_failures_are_an_outage(status: int | None, hint: str | None, message: str,
                                          outage: bool) -> None:
    assert is_outage(classify_api_error(status, hint, message), status) is outage


@pytest.mark.parametrize(("kind", "status", "outage"), [
    (None, 529, True), (None, 429, True), (None, 500, True), (None, 599, True),
    (None, 401, False), (None, None, False), ("usage_limit", 429, False),
    ("unknown", 500, False),  # a kind decides when there is one
])
def test_is_outage_without_or_with_a_kind(kind: str | None, status: int | None,
                                          outage: bool) -> None:
    assert is_outage(kind, status) is outage


_NOW = 10_000.0


def _row(state: OutageState, wake_at: float = _NOW + 60, prober: str | None = None,
         probe_started: float | None = None) -> OutageRow:
    return OutageRow("cred", "HTTP 529", 2, wake_at, state, prober, probe_started, "main.a")


@pytest.mark.parametrize(("row", "node", "expected"), [
    (None, "main.a", (OutageAction.LAUNCH, None)),
    (_row(OutageState.WAITING), "main.a", (OutageAction.WAIT, _NOW + 60)),
    (_row(OutageState.WAITING, wake_at=_NOW), "main.b", (OutageAction.PROBE, None)),
    (_row(OutageState.PROBING, prober="main.a", probe_started=_NOW), "main.a",
     (OutageAction.PROBE, None)),
    (_row(OutageState.PROBING, prober="main.a", probe_started=_NOW - 1), "main.b",
     (OutageAction.WAIT, _NOW + 5)),
    (_row(OutageState.PROBING, prober="main.a", probe_started=_NOW - OUTAGE_PROBE_STALE),
     "main.b", (OutageAction.PROBE, None)),  # a silent probe is taken as lost
])
def test_decide_outage(row: OutageRow | None, node: str,
                       expected: tuple[OutageAction, float | None]) -> None:
    assert decide_outage(row, node, _NOW, 5.0) == expected


def test_the_wording() -> None:
    until = float(calendar.timegm((2026, 12, 7, 1, 23, 45, 0, 0, 0)))
    assert outage_label("overloaded", 529) == "HTTP 529"
    assert outage_label("connection", None) == "connection"
    detail = outage_detail("HTTP 529", 4, until)
    assert detail == ("waiting out a provider outage (HTTP 529, attempt 4) until "
                      "2026-12-07 01:23:45Z")
    assert cut_short_hint(detail, "main.a").endswith(
        "; to launch now: fractal node pause main.a && fractal node resume main.a")
    assert outage_over_notice("HTTP 500", 4, 190) == \
        "provider outage over (HTTP 500, 4 attempts, 3m 10s)"
    assert outage_over_notice("connection", 1, 30) == "provider outage over (connection, 1 attempt, 30s)"


@pytest.mark.parametrize(("line", "result"), [
    ('{"type": "api_error", "status": 529, "message": "overloaded"}',
     ResultEvent(ok=False, error="overloaded", error_kind="overloaded", api_status=529)),
    ('{"type": "api_error", "kind": "connection", "message": "ECONNREFUSED"}',
     ResultEvent(ok=False, error="ECONNREFUSED", error_kind="connection")),
    ('{"type": "api_error", "status": "x"}',
     ResultEvent(ok=False, error="API error", error_kind="unknown")),
])
def test_the_command_protocol_reports_an_api_error(line: str, result: ResultEvent) -> None:
    parser = CommandParser()
    parser.feed(line)
    assert parser.finish() == [result]
