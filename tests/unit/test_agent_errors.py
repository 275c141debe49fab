"""Failure classes and reasons of agent API errors (domain.agent.errors)."""

from __future__ import annotations

import pytest

from fractal.domain.agent.errors import (
    ERROR_KINDS,
    agent_error_text,
    classify_api_error,
    status_in_message,
)


@pytest.mark.parametrize(("status", "hint", "message", "kind"), [
    (429, None, "", "rate_limit"),
    (529, "server_error", "", "overloaded"),  # the status outranks claude's synthetic hint
    (503, None, "", "overloaded"),
    (401, None, "", "auth"),
    (403, None, "", "auth"),
    (400, None, "", "bad_request"),
    (404, None, "", "bad_request"),
    (408, None, "", "connection"),
    (500, None, "", "server_error"),
    (None, "authentication_failed", "", "auth"),
    (None, "rate_limit", "", "rate_limit"),
    (None, "invalid_request_error", "", "bad_request"),
    (None, "unknown", "API Error: Unable to connect to API (ConnectionRefused)", "connection"),
    (None, None, "API Error: Unable to connect to API (ECONNRESET)", "connection"),
    (None, None, "We’re currently experiencing high demand, which may cause temporary errors.",
     "overloaded"),
    (None, None, "exceeded retry limit, last status: 429 Too Many Requests", "rate_limit"),
    (None, None, "something else", "unknown"),
])
def test_classify_api_error(status: int | None, hint: str | None, message: str,
                            kind: str) -> None:
    assert classify_api_error(status, hint, message) == kind
    assert kind in ERROR_KINDS


@pytest.mark.parametrize(("message", "status"), [
    ("exceeded retry limit, last status: 429 Too Many Requests", 429),
    ("unexpected status 401 Unauthorized: mock: scripted HTTP 401, url: http://x/v1", 401),
    ("API Error: 500 mock: scripted HTTP 500", 500),
    ("API Error: Request rejected (429) · mock", 429),
    ("took 2000 ms (200)", None),
    ("no status here", None),
])
def test_status_in_message(message: str, status: int | None) -> None:
    assert status_in_message(message) == status


@pytest.mark.parametrize(("kind", "status", "message", "text"), [
    ("rate_limit", 429, "API Error: Request rejected", "rate_limit (HTTP 429): API Error: Request rejected"),
    ("overloaded", None, "high demand", "overloaded: high demand"),
    (None, None, "error_during_execution (aborted_tools)", "error_during_execution (aborted_tools)"),
    (None, None, "  ", "the agent reported an error"),
])
def test_agent_error_text(kind: str | None, status: int | None, message: str,
                          text: str) -> None:
    assert agent_error_text(kind, status, message) == text
