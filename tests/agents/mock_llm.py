"""A loopback mock LLM server for the real-CLI test tier (Python stdlib only).

It speaks just enough of two APIs for Claude Code and Codex to run headless against it
(spec/agent-clis.md, "The mock"):

- Anthropic Messages: ``POST /v1/messages`` (SSE when ``stream: true``, which the CLI sends,
  as ``/v1/messages?beta=true``), ``POST /v1/messages/count_tokens``;
- OpenAI Responses: ``POST /v1/responses`` (SSE), the only endpoint Codex uses;
- ``GET /v1/models`` and ``HEAD /`` (Claude Code's preflight).

Answers are stateless (``mock_wire.decide``): a tool call when tools are offered and the
last turn is not a tool result, else the final text; every call uses the same fixed token
usage, so the CLIs' own figures are deterministic. Each request is kept (``requests``) and,
with ``--log``, appended to a JSON-lines file. It binds 127.0.0.1 only.

Usage windows (subscription limits): ``close_window(until, window)`` makes every model
call before ``until`` (epoch s) answer as a used-up window does — HTTP 429 with
Anthropic's ``anthropic-ratelimit-unified-*`` headers (which Claude Code reads only for a
subscriber login) or OpenAI's ``usage_limit_reached`` body with the ``x-codex-*`` headers;
after ``until`` calls are answered normally with an ``allowed`` window. ``warn_window(u)``
answers normally but reports ``u`` (0..1) of the window used. ``usage_answers()`` lists
what each model call got (``rejected`` / ``allowed`` / ``warning``).

Provider outages: ``outage_at_first_call(status, lasting)`` answers every model call with
HTTP ``status`` (500, 529 ...) for ``lasting`` seconds from the next model call.

Use it in-process (``MockLLM(...).start()``) or as a program::

    python -m tests.agents.mock_llm --port 0 --port-file PORT --log requests.jsonl \\
        [--input-tokens 1000 --output-tokens 100] [--fail-status 500 --fail-count 1]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.agents.mock_wire import (
    Decision,
    Event,
    Options,
    anthropic_error,
    anthropic_events,
    anthropic_message,
    decide,
    openai_error,
    responses_events,
)

MODELS = ("claude-opus-4-8", "claude-sonnet-5", "claude-haiku-4-5-20251001", "gpt-5.5")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, mock: MockLLM, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.mock = mock


class MockLLM:
    """The server: ``start()`` binds 127.0.0.1 (``port`` 0 = any free port) and serves on a
    daemon thread; ``stop()`` shuts it down and ends any stall at once.

    ``requests`` lists every request seen, in order, as dicts: ``method``, ``path``,
    ``headers`` (dict), ``body`` (parsed JSON or None), ``answer`` (a summary) and ``at``
    (epoch seconds it arrived).
    """

    def __init__(self, options: Options | None = None, port: int = 0,
                 log: Path | None = None) -> None:
        self.options = options or Options()
        self.requests: list[dict[str, Any]] = []
        self.log = log
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._failed = 0
        self.window_until: float | None = None
        self.window_name = "five_hour"
        self.window_use: float | None = None
        self.warn_reset: float | None = None
        self._close_for: float | None = None  # close_window_at_first_call's pending spans
        self._again_for: float | None = None
        self._warn_for: float | None = None
        self.clock_only = False  # a closed window sends no x-codex-* headers: see close_window
        self._outage: tuple[int, float] | None = None  # outage_at_first_call's, pending
        self.outage_until: float | None = None
        self.outage_status = 500
        self._server = _Server(self, port)
        self._thread = threading.Thread(target=self._server.serve_forever, name="mock-llm",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash, no ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MockLLM:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def posts(self, path_prefix: str) -> list[dict[str, Any]]:
        """The POST requests whose path starts with ``path_prefix`` (e.g. ``/v1/responses``)."""
        with self._lock:
            return [r for r in self.requests
                    if r["method"] == "POST" and r["path"].startswith(path_prefix)]

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log is not None:
                with self.log.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(entry) + "\n")

    def close_window(self, until: float, window: str = "five_hour") -> None:
        """Every model call before ``until`` (epoch s) meets a used-up usage window."""
        with self._lock:
            self.window_until, self.window_name = until, window

    def close_window_at_first_call(self, lasting: float, again: float | None = None,
                                   window: str = "five_hour", clock_only: bool = False) -> None:
        """The next model call finds the window used up, stating a reset ``lasting``
        seconds after that call; calls before the reset meet it too. With ``again``, the
        first call at or after that reset meets the window once more (a reset that
        drifted), now stating a reset ``again`` seconds after it. With ``clock_only`` a
        rejected Responses answer carries no ``x-codex-*`` headers, so Codex records
        ``rate_limits.primary: null`` and states the reset only as a clock time to the
        minute (``try again at 12:07 AM``), as it did in the field.

        Anchored at the calls rather than at the clock, a short window still meets the
        first call however long the CLI takes to start, and the probe after the first
        reset meets the second window however late it comes."""
        with self._lock:
            self._close_for, self._again_for, self.window_name = lasting, again, window
            self.clock_only = clock_only

    def warn_window(self, utilization: float | None, resets_in: float | None = None) -> None:
        """Report ``utilization`` (0..1) of the window used on each answer (None: stop).
        With ``resets_in``, the window's stated reset is that many seconds after the next
        model call (else 5 h after the last closing, or after each call)."""
        with self._lock:
            self.window_use, self._warn_for = utilization, resets_in

    def window_state(self) -> tuple[str, float, str]:
        """(``rejected`` | ``warning`` | ``allowed``, reset instant, window name) for a
        model call arriving now (it starts the spans ``close_window_at_first_call`` and
        ``warn_window`` left pending)."""
        now = time.time()
        with self._lock:
            if self._close_for is not None:
                self.window_until, self._close_for = now + self._close_for, None
            elif (self._again_for is not None and self.window_until is not None
                  and now >= self.window_until):
                self.window_until, self._again_for = now + self._again_for, None
            if self._warn_for is not None:
                self.warn_reset, self._warn_for = now + self._warn_for, None
            until, name, use, warn_reset = (self.window_until, self.window_name,
                                            self.window_use, self.warn_reset)
        if until is not None and now < until:
            return "rejected", until, name
        if warn_reset is not None:
            reset = warn_reset
        else:
            reset = until + 5 * 3600 if until is not None else now + 5 * 3600
        return ("warning" if use is not None else "allowed"), reset, name

    def usage_answers(self) -> list[str]:
        """What each model call got from the usage window, in order."""
        with self._lock:
            return [str(r["answer"].get("usage")) for r in self.requests
                    if r["method"] == "POST" and "usage" in r["answer"]]

    def outage_at_first_call(self, status: int, lasting: float) -> None:
        """A provider outage: from the next model call, every model call for ``lasting``
        seconds is answered with HTTP ``status`` (an error body, ``retry-after: 1`` on 429
        and 529); later calls are answered normally. Anchored at that call, as
        ``close_window_at_first_call`` is, so a CLI's start-up does not eat into it."""
        with self._lock:
            self._outage = (status, lasting)

    def outage_now(self, status: int, lasting: float) -> None:
        """A provider outage from now: every model call for ``lasting`` seconds is
        answered with HTTP ``status`` (the night's weather, anchored at the clock)."""
        with self._lock:
            self._outage = None
            self.outage_status, self.outage_until = status, time.time() + lasting

    def forced_status(self) -> int | None:
        """The outage's status while it lasts; else ``--fail-status`` for the first
        ``--fail-count`` model calls, then None."""
        with self._lock:
            now = time.time()
            if self._outage is not None:
                self.outage_status, lasting = self._outage
                self.outage_until, self._outage = now + lasting, None
            if self.outage_until is not None and now < self.outage_until:
                return self.outage_status
            if self.options.fail_status is None or self._failed >= self.options.fail_count:
                return None
            self._failed += 1
            return self.options.fail_status


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the request log is the record

    # -- routing -------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._entry(None, {"status": 200})
        self._send_json(200, None)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path.rstrip("/").endswith("/models"):
            data = [{"id": m, "type": "model", "object": "model", "display_name": m,
                     "created_at": "2026-01-01T00:00:00Z", "created": 0, "owned_by": "mock"}
                    for m in MODELS]
            self._entry(None, {"status": 200})
            self._send_json(200, {"object": "list", "data": data, "has_more": False,
                                  "first_id": MODELS[0], "last_id": MODELS[-1]})
            return
        self._entry(None, {"status": 404})
        self._send_json(404, {"error": {"type": "not_found", "message": f"no route {path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        path = urlsplit(self.path).path
        if not isinstance(body, dict):
            self._entry(body, {"status": 400})
            self._send_json(400, {"error": {"type": "invalid_request_error",
                                            "message": "mock: body is not a JSON object"}})
        elif path == "/v1/messages/count_tokens":
            self._entry(body, {"status": 200})
            self._send_json(200, {"input_tokens": self.server.mock.options.input_tokens})
        elif path == "/v1/messages":
            self._model_call(body, "messages", body.get("messages") or [])
        elif path == "/v1/responses":
            self._model_call(body, "responses", body.get("input") or [])
        else:
            self._entry(body, {"status": 404})
            self._send_json(404, {"error": {"type": "not_found", "message": f"no route {path}"}})

    # -- model calls ---------------------------------------------------------------------

    def _model_call(self, body: dict[str, Any], api: str, turns: list[Any]) -> None:
        mock = self.server.mock
        state, reset, window = mock.window_state()
        headers = window_headers(api, state, reset, window, mock.window_use)
        if state == "rejected" and api == "responses" and mock.clock_only:
            headers = {}  # no rate-limit facts: the CLI says only `try again at H:MM AM`
        if state == "rejected":
            self._entry(body, {"status": 429, "usage": state})
            self._send_json(429, usage_limit_body(api, reset), headers)
            return
        self._headers = headers
        tools = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
        decision = decide(turns, tools, mock.options, mock.forced_status())
        model = str(body.get("model") or MODELS[0])
        summary: dict[str, Any] = {"status": decision.status, "tool": decision.tool,
                                   "arguments": decision.arguments, "text": decision.text}
        if mock.window_until is not None or mock.window_use is not None:
            summary["usage"] = state
        self._entry(body, summary)
        if decision.status != 200:
            error = anthropic_error if api == "messages" else openai_error
            retry = {"retry-after": "1"} if decision.status in (429, 529) else {}
            self._send_json(decision.status, error(decision.status), retry)
        elif api == "messages" and not body.get("stream"):
            self._send_json(200, anthropic_message(decision, model, mock.options), headers)
        elif api == "messages":
            self._send_sse(anthropic_events(decision, model, mock.options), decision)
        else:
            self._send_sse(responses_events(decision, model, mock.options), decision)

    # -- writing -------------------------------------------------------------------------

    def _entry(self, body: Any, answer: dict[str, Any]) -> None:
        self.server.mock.record({"method": self.command, "path": self.path,
                                 "headers": dict(self.headers.items()), "body": body,
                                 "answer": answer, "at": time.time()})

    def _send_json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_mock")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_sse(self, events: list[Event], decision: Decision) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_mock")
        for key, value in getattr(self, "_headers", {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            for index, (name, data) in enumerate(events):
                chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if (index == 0 and decision.stall > 0
                        and self.server.mock.stopping.wait(decision.stall)):
                    self.close_connection = True  # shutting down: end the stream here
                    return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def window_headers(api: str, state: str, reset: float, window: str,
                   use: float | None) -> dict[str, str]:
    """The rate-limit response headers a subscription window sends in ``state``."""
    stamp = str(int(reset))
    if api == "messages":
        short = "7d" if window.startswith("seven_day") else "5h"
        status = {"rejected": "rejected", "warning": "allowed_warning"}.get(state, "allowed")
        headers = {"anthropic-ratelimit-unified-status": status,
                   "anthropic-ratelimit-unified-reset": stamp,
                   "anthropic-ratelimit-unified-representative-claim": window,
                   "anthropic-ratelimit-unified-overage-status": "rejected",
                   "anthropic-ratelimit-unified-overage-disabled-reason": "org_level_disabled",
                   f"anthropic-ratelimit-unified-{short}-reset": stamp,
                   f"anthropic-ratelimit-unified-{short}-utilization":
                       "1" if state == "rejected" else str(use if use is not None else 0.1)}
        if state == "warning":
            headers[f"anthropic-ratelimit-unified-{short}-surpassed-threshold"] = "0.95"
        return headers
    used = 100.0 if state == "rejected" else (use or 0.1) * 100
    return {"x-codex-plan-type": "plus", "x-codex-primary-used-percent": f"{used:g}",
            "x-codex-primary-window-minutes": "300", "x-codex-primary-reset-at": stamp,
            "x-codex-primary-reset-after-seconds": str(max(0, int(reset - time.time()))),
            "x-codex-secondary-used-percent": "20", "x-codex-secondary-window-minutes": "10080",
            "x-codex-secondary-reset-at": str(int(reset) + 3 * 86400),
            "x-codex-credits-has-credits": "False"}


def usage_limit_body(api: str, reset: float) -> dict[str, Any]:
    """The 429 body of a used-up window for ``api``."""
    if api == "messages":
        return {"type": "error", "error": {
            "type": "rate_limit_error",
            "message": "This request would exceed your account's rate limit. "
                       "Please try again later."}}
    return {"error": {"type": "usage_limit_reached",
                      "message": "The usage limit has been reached", "plan_type": "plus",
                      "resets_at": int(reset),
                      "resets_in_seconds": max(0, int(reset - time.time())),
                      "eligible_promo": None}}


def main(argv: list[str] | None = None) -> int:
    """Run the mock until interrupted; write the bound port to ``--port-file``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--input-tokens", type=int, default=1000)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--text")
    parser.add_argument("--bash")
    parser.add_argument("--fail-status", type=int)
    parser.add_argument("--fail-count", type=int, default=1)
    parser.add_argument("--stall", type=float, default=0.0)
    args = parser.parse_args(argv)
    options = replace(Options(), input_tokens=args.input_tokens,
                      output_tokens=args.output_tokens, fail_status=args.fail_status,
                      fail_count=args.fail_count, stall=args.stall)
    if args.text:
        options = replace(options, text=args.text)
    if args.bash:
        options = replace(options, command=args.bash)
    mock = MockLLM(options, port=args.port, log=args.log).start()
    if args.port_file:
        args.port_file.write_text(f"{mock.port}\n")
    try:
        mock.stopping.wait()
    except KeyboardInterrupt:
        pass
    finally:
        mock.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
