"""Classify an agent CLI's API failure and word it for the step row.

A failed step's reason names the failure class, the HTTP status when the CLI gave one and
the CLI's message, so later work can tell a transient failure (rate limit, overload,
server error, connection) from one that will fail again (authentication, bad request).
Pure: strings and numbers in, strings out.
"""

from __future__ import annotations

import re

__all__ = [
    "ERROR_KINDS",
    "TRANSIENT_KINDS",
    "USAGE_LIMIT",
    "agent_error_text",
    "classify_api_error",
    "status_in_message",
]

ERROR_KINDS: tuple[str, ...] = (
    "rate_limit", "overloaded", "auth", "bad_request", "server_error", "connection", "unknown")
"""Every value ``classify_api_error`` returns."""
USAGE_LIMIT = "usage_limit"
"""The error kind of a stop at a closed subscription usage window. Parsers set it only
from the CLI's structured report (never from text); it is neither retried nor a failure:
the loop waits for the window to reopen."""

TRANSIENT_KINDS: frozenset[str] = frozenset(
    {"rate_limit", "overloaded", "server_error", "connection"})
"""Kinds that a later attempt may well get past."""

# Words the CLIs use for a failure class (claude's api_retry ``error`` and synthetic
# ``error`` fields; OpenAI error ``type``/``code`` values).
_HINTS: dict[str, str] = {
    "rate_limit": "rate_limit", "rate_limit_error": "rate_limit",
    "rate_limit_exceeded": "rate_limit", "insufficient_quota": "rate_limit",
    "overloaded": "overloaded", "overloaded_error": "overloaded",
    "server_is_overloaded": "overloaded",
    "authentication_failed": "auth", "authentication_error": "auth",
    "permission_error": "auth", "billing_error": "auth", "invalid_api_key": "auth",
    "invalid_request": "bad_request", "invalid_request_error": "bad_request",
    "not_found_error": "bad_request", "request_too_large": "bad_request",
    "server_error": "server_error", "api_error": "server_error",
}

# Message fragments (lower case), checked in order.
_PHRASES: tuple[tuple[str, str], ...] = (
    ("unable to connect", "connection"), ("econnreset", "connection"),
    ("econnrefused", "connection"), ("connection refused", "connection"),
    ("connection reset", "connection"), ("connection error", "connection"),
    ("enotfound", "connection"), ("eai_again", "connection"), ("getaddrinfo", "connection"),
    ("dns error", "connection"), ("failed to lookup address", "connection"),
    ("name resolution", "connection"), ("error sending request", "connection"),
    ("rate limit", "rate_limit"), ("too many requests", "rate_limit"),
    ("overloaded", "overloaded"), ("high demand", "overloaded"),
    ("unauthorized", "auth"), ("authenticat", "auth"), ("invalid api key", "auth"),
    ("forbidden", "auth"),
    ("invalid_request", "bad_request"), ("bad request", "bad_request"),
    ("internal server error", "server_error"),
)

_STATUS = re.compile(r"\bstatus:?\s+(\d{3})\b|\bAPI Error:\s+(\d{3})\b|\((\d{3})\)")


def classify_api_error(status: int | None, hint: str | None = None, message: str = "") -> str:
    """The failure class of an API error, one of ERROR_KINDS.

    ``status`` (the HTTP status) decides first: 429 rate_limit; 503/529 overloaded;
    401/403 auth; 408 connection; other 4xx bad_request; 5xx server_error. Then ``hint``
    (the CLI's own class word, e.g. claude's ``authentication_failed``, OpenAI's
    ``invalid_request_error``), then phrases in ``message``; ``unknown`` otherwise.
    """
    if status is not None:
        if status == 429:
            return "rate_limit"
        if status in (503, 529):
            return "overloaded"
        if status in (401, 403):
            return "auth"
        if status == 408:
            return "connection"
        if 400 <= status < 500:
            return "bad_request"
        if status >= 500:
            return "server_error"
    if hint and hint.lower() in _HINTS:
        return _HINTS[hint.lower()]
    lowered = message.lower()
    for phrase, kind in _PHRASES:
        if phrase in lowered:
            return kind
    return "unknown"


def status_in_message(message: str) -> int | None:
    """An HTTP status (400..599) named in a CLI's error text, or None.

    Recognises ``status 401``, ``last status: 429``, ``API Error: 500`` and ``(429)``.
    """
    for match in _STATUS.finditer(message):
        value = int(next(g for g in match.groups() if g))
        if 400 <= value <= 599:
            return value
    return None


def agent_error_text(kind: str | None, status: int | None, message: str) -> str:
    """The body of an ``agent error: ...`` reason.

    ``rate_limit (HTTP 429): API Error: Request rejected ...``; without a status
    ``overloaded: <message>``; without a kind just the message (or ``the agent reported
    an error`` when that is empty too).
    """
    message = message.strip() or "the agent reported an error"
    if kind is None:
        return message
    label = f"{kind} (HTTP {status})" if status is not None else kind
    return f"{label}: {message}"
