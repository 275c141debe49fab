"""The ``codex`` backend: OpenAI Codex CLI driven headless (``codex exec --json``).

Command lines::

    codex exec [extra words] --json -C <worktree> [-m M] [-c model_reasoning_effort="E"]
        [route -c flags] -- <prompt>
    codex exec [extra words] resume <thread_id> --json [-m M] [-c ...] [route -c flags]
        -- <prompt>

with stdin ``/dev/null`` (Codex appends a piped stdin to the prompt and can hang on it) and
``CODEX_HOME=<node_dir>/.codex`` (sessions, sqlite state and the linked ``auth.json`` live
there). Extra words go right after ``exec``, where Codex takes its exec flags (the ones
``resume`` needs before it). The thread id comes from the stream (Codex mints it). The
``openrouter`` route is an inline model provider whose key Codex reads from
``OPENROUTER_API_KEY``. Codex's own retry loop is bounded (``REQUEST_RETRIES``,
``STREAM_RETRIES``) for the openrouter route and for a custom provider the node's
``config.toml`` selects, as ``-c`` overrides; the loop waits out a provider outage
itself. The stream is read by ``fractal.agents.codex_stream``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from fractal.agents.base import (
    OPENROUTER,
    OPENROUTER_KEY_ENV,
    Invocation,
    LaunchRequest,
    route_problem,
)
from fractal.agents.codex_stream import CodexParser
from fractal.domain.agenthomes import codex_home

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"


def _toml(value: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML escapes for these)."""
    return json.dumps(value)


REQUEST_RETRIES = 1
"""Codex's ``request_max_retries`` under fractal (its own default is 4): a provider outage
is waited out by the loop with a doubling back-off (``runtime/outagewait.py``), so the
CLI's own loop only smooths a single dropped request."""
STREAM_RETRIES = 1
"""Codex's ``stream_max_retries`` under fractal (its own default is 5); each stream retry
runs the request retries again, so the two bound a launch at 4 model calls."""
_RETRY_KEYS = (("request_max_retries", REQUEST_RETRIES), ("stream_max_retries", STREAM_RETRIES))
_PROVIDER_ID = re.compile(r"[A-Za-z0-9_-]+")


def route_flags(provider: str | None) -> list[str]:
    """The ``-c`` overrides that select ``provider`` (empty for Codex's own), its retry
    bounds included."""
    if provider != OPENROUTER:
        return []
    table = ", ".join(f"{key}={_toml(value)}" for key, value in (
        ("name", "OpenRouter"), ("base_url", OPENROUTER_BASE_URL),
        ("env_key", OPENROUTER_KEY_ENV), ("wire_api", "responses")))
    retries = ", ".join(f"{key}={bound}" for key, bound in _RETRY_KEYS)
    return ["-c", f"model_provider={_toml(OPENROUTER)}",
            "-c", f"model_providers.{OPENROUTER}={{{table}, {retries}}}"]


def retry_flags(config_toml: Path) -> list[str]:
    """The ``-c`` overrides that bound the retries of the custom provider the node's
    ``config.toml`` selects (``model_provider`` naming a ``[model_providers.X]`` table):
    ``REQUEST_RETRIES`` and ``STREAM_RETRIES``, or the file's own value where it is
    lower. Empty when the file is missing or unreadable, or selects Codex's built-in
    provider (a ``-c`` table for it would replace its definition, not bound it)."""
    try:
        text = config_toml.read_text(encoding="utf-8")
    except OSError:
        return []
    import tomllib  # only a codex launch with a config.toml reads TOML

    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return []
    name = data.get("model_provider")
    providers = data.get("model_providers")
    if not isinstance(name, str) or not _PROVIDER_ID.fullmatch(name) or \
            not isinstance(providers, dict) or not isinstance(providers.get(name), dict):
        return []
    table = providers[name]
    flags: list[str] = []
    for key, bound in _RETRY_KEYS:
        own = table.get(key)
        value = min(bound, own) if isinstance(own, int) and not isinstance(own, bool) \
            and own >= 0 else bound
        flags += ["-c", f"model_providers.{name}.{key}={value}"]
    return flags


class CodexBackend:
    """The Codex CLI. ``extra`` words from the agent setting follow ``exec``."""

    name = "codex"
    mints_session = True  # the thread id arrives in thread.started
    enforces_budget = False
    soft_interrupt: int | None = None  # SIGINT prints no final event either
    requires_result = True
    providers: frozenset[str] = frozenset({OPENROUTER})

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self.extra = list(extra)

    def binary(self) -> str:
        """``codex`` on PATH."""
        return "codex"

    def invocation(self, request: LaunchRequest) -> Invocation:
        """The ``codex exec`` command line for ``request`` (module docstring).

        A resumed thread runs in the worktree too (the launch's cwd); ``resume`` takes no
        ``-C``.
        """
        argv = [self.binary(), "exec", *self.extra]
        if request.resume:
            argv += ["resume", request.resume, "--json"]
        else:
            argv += ["--json", "-C", str(request.worktree)]
        if request.model:
            argv += ["-m", request.model]
        if request.effort:
            argv += ["-c", f"model_reasoning_effort={_toml(request.effort)}"]
        argv += route_flags(request.provider) or \
            retry_flags(codex_home(request.node_dir) / "config.toml")
        argv += ["--", request.prompt]
        return Invocation(argv=argv)

    def env(self, request: LaunchRequest, environ: Mapping[str, str]) -> dict[str, str | None]:
        """``CODEX_HOME`` is the node's own home, whatever the caller exported."""
        return {"CODEX_HOME": str(codex_home(request.node_dir))}

    def parser(self, request: LaunchRequest) -> CodexParser:
        """A ``--json`` parser that knows the thread's usage before this launch and reads
        the launch's rollout under the node's ``CODEX_HOME`` for usage-window facts."""
        return CodexParser(prior=request.prior_usage if request.resume else None,
                           sessions=codex_home(request.node_dir) / "sessions",
                           since=time.time() - 1.0)

    def preflight(self, provider: str | None, env: Mapping[str, str]) -> str | None:
        """The route must be ``openrouter`` (or none), and its key must be set."""
        return route_problem(self, provider, env)

