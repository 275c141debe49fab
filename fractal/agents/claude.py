"""The ``claude`` backend: Claude Code driven headless (``claude -p``, stream-json).

Command line::

    claude [extra words] -p --output-format stream-json --verbose [--model M] [--effort E]
        [--max-budget-usd B] [--settings <node_dir>/.claude/settings.json]
        (--session-id <uuid> | --resume <id>) -- <prompt>

with stdin ``/dev/null``. fractal mints the session id of a fresh session; ``--resume``
continues one (same id). What the stream says, and how it is read, is in
``fractal.agents.claude_stream``. SIGINT makes the CLI print a final
``result`` with its cost, where SIGTERM kills it silently, so SIGINT is the soft interrupt.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence

from fractal.agents.base import (
    OPENROUTER,
    OPENROUTER_KEY_ENV,
    Invocation,
    LaunchRequest,
    route_problem,
)
from fractal.agents.claude_stream import ClaudeParser
from fractal.domain.agent.homes import claude_settings_path

OPENROUTER_BASE_URL = "https://openrouter.ai/api"

# Effort variables of the operator's own Claude Code session must not steer the agent
# (they are removed from its environment): the per-step effort is the --effort flag.
_EFFORT_ENV = ("CLAUDE_EFFORT", "CLAUDE_CODE_EFFORT_LEVEL")


class ClaudeBackend:
    """Claude Code. ``extra`` words from the agent setting follow the binary."""

    name = "claude"
    mints_session = False  # fractal chooses the id: --session-id <uuid4>
    enforces_budget = True  # --max-budget-usd
    soft_interrupt: int | None = signal.SIGINT
    requires_result = True
    providers: frozenset[str] = frozenset({OPENROUTER})

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self.extra = list(extra)

    def binary(self) -> str:
        """``claude`` on PATH."""
        return "claude"

    def invocation(self, request: LaunchRequest) -> Invocation:
        """The ``claude -p`` command line for ``request`` (module docstring); stdin /dev/null.

        ``resume`` wins over ``new_session``; with neither, the CLI picks its own id.
        """
        argv = [self.binary(), *self.extra, "-p", "--output-format", "stream-json", "--verbose"]
        if request.model:
            argv += ["--model", request.model]
        if request.effort:
            argv += ["--effort", request.effort]
        if request.budget_usd is not None:
            argv += ["--max-budget-usd", f"{request.budget_usd:.6f}"]
        settings = claude_settings_path(request.node_dir)
        if settings.is_file():
            argv += ["--settings", str(settings)]
        if request.resume:
            argv += ["--resume", request.resume]
        elif request.new_session:
            argv += ["--session-id", request.new_session]
        argv += ["--", request.prompt]
        return Invocation(argv=argv)

    def env(self, request: LaunchRequest, environ: Mapping[str, str]) -> dict[str, str | None]:
        """Drop the effort variables; on the ``openrouter`` route point the CLI at OpenRouter
        (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN`` = ``$OPENROUTER_API_KEY``, an empty
        ``ANTHROPIC_API_KEY``). The native route keeps the caller's variables, so
        a base URL exported for ``fractal node start`` reaches the CLI."""
        reserved: dict[str, str | None] = dict.fromkeys(_EFFORT_ENV)
        if request.provider == OPENROUTER:
            reserved.update({
                "ANTHROPIC_BASE_URL": OPENROUTER_BASE_URL,
                "ANTHROPIC_AUTH_TOKEN": environ.get(OPENROUTER_KEY_ENV, ""),
                "ANTHROPIC_API_KEY": "",
            })
        return reserved

    def parser(self, request: LaunchRequest) -> ClaudeParser:
        """A stream-json parser. On a provider route the CLI's ``total_cost_usd`` is priced
        at Anthropic's rates, not the route's, so no cost is taken from it (NULL until a
        pricing module prices the recorded token usage)."""
        return ClaudeParser(cli_priced=request.provider is None)

    def preflight(self, provider: str | None, env: Mapping[str, str]) -> str | None:
        """The route must be ``openrouter`` (or none), and its key must be set."""
        return route_problem(self, provider, env)

