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
``OPENROUTER_API_KEY``. The stream is read by ``fractal.agents.codex_stream``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

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


def route_flags(provider: str | None) -> list[str]:
    """The ``-c`` overrides that select ``provider`` (empty for Codex's own)."""
    if provider != OPENROUTER:
        return []
    table = ", ".join(f"{key}={_toml(value)}" for key, value in (
        ("name", "OpenRouter"), ("base_url", OPENROUTER_BASE_URL),
        ("env_key", OPENROUTER_KEY_ENV), ("wire_api", "responses")))
    return ["-c", f"model_provider={_toml(OPENROUTER)}",
            "-c", f"model_providers.{OPENROUTER}={{{table}}}"]


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
        argv += route_flags(request.provider)
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

