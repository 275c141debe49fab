"""The backend protocol every agent CLI is driven through, and the helpers they share.

A backend turns one launch request into a command line (``invocation``) and turns the
agent's stdout, line by line, into typed events (``StreamParser``). The loop never
looks at an agent's raw output itself. Which backend a setting names is decided by
``fractal.agents.registry``; this module imports no backend.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from fractal.domain.values import by_type
from fractal.errors import InvalidValue

DEFAULT_AGENT = "claude"

# The stream events are NamedTuples (see ``fractal.domain.values``): each supervisor
# defines all nine.


@by_type
class SessionEvent(NamedTuple):
    """The agent named (or echoed) its session id."""

    session: str


@by_type
class TextEvent(NamedTuple):
    """Human-readable output: assistant text or an unparsed line."""

    text: str


@by_type
class ToolEvent(NamedTuple):
    """The agent used a tool (``name``) with a short ``detail`` (a command, a path)."""

    name: str
    detail: str = ""


@by_type
class CostEvent(NamedTuple):
    """Spend reported by the agent, USD, for this invocation so far (replaces earlier figures)."""

    usd: float


@by_type
class ModelEvent(NamedTuple):
    """The model that actually served the request."""

    model: str


@by_type
class ResultEvent(NamedTuple):
    """The agent's final event. ``ok`` False carries ``error``; ``budget_stopped`` marks a
    clean stop at the agent-enforced budget (the CLI ended the step because its dollar
    budget for the step ran out; not a failure).

    ``error_kind`` classifies an API failure (one of ``domain.agent.errors.ERROR_KINDS``:
    ``rate_limit``, ``overloaded``, ``auth``, ``bad_request``, ``server_error``,
    ``connection``, ``unknown``; None when the failure was not an API error) and
    ``api_status`` is its HTTP status when the CLI names one.
    """

    ok: bool
    error: str = ""
    budget_stopped: bool = False
    error_kind: str | None = None
    api_status: int | None = None


@by_type
class UsageEvent(NamedTuple):
    """Token usage of this invocation so far (not of the whole session): input tokens
    (cached ones included), the cached subset of them, and output tokens. The last one
    wins; a CLI that reports thread totals is turned into per-invocation figures by its
    parser (codex: ``LaunchRequest.prior_usage``)."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int


@by_type
class NoticeEvent(NamedTuple):
    """Something worth showing that is neither output nor failure (a warning). ``retry``
    marks the CLI retrying an API call (counted and shown in the pane)."""

    text: str
    retry: bool = False


@by_type
class WindowEvent(NamedTuple):
    """The CLI reported its subscription usage window (not token usage).

    ``rejected`` True: the window is used up and the CLI stopped (a usage-limit stop,
    never an ordinary failure); ``window`` names it (``five_hour``, ``seven_day``, ...)
    and ``resets_at`` is when it reopens (epoch seconds; None when not stated).
    ``rejected`` False: a warning that ``utilization`` (0..1) of the window is used.
    """

    rejected: bool
    window: str = "unknown"
    resets_at: float | None = None
    utilization: float | None = None


AgentEvent = (SessionEvent | TextEvent | ToolEvent | CostEvent | ModelEvent | ResultEvent
              | UsageEvent | NoticeEvent | WindowEvent)

Usage = tuple[int, int, int]
"""(input_tokens, cached_input_tokens, output_tokens), as in ``UsageEvent``."""


class StreamParser(Protocol):
    """Stateful parser for one launch's stdout."""

    def feed(self, line: str) -> list[AgentEvent]:
        """Parse one complete stdout line (newline stripped) into zero or more events."""
        ...

    def finish(self) -> list[AgentEvent]:
        """Called once at end of stream; returns any trailing events."""
        ...


@dataclass(frozen=True)
class LaunchRequest:
    """What the loop asks of one agent launch.

    ``resume`` is a session to continue (continuous mode) or None for a fresh one;
    ``new_session`` is an id fractal minted for a fresh session (backends whose CLI
    accepts one use it); ``budget_usd`` is set only when the loop wants it enforced.
    ``provider`` is the resolved provider route (None: the CLI's own); ``prior_usage`` is
    the session's token usage before this launch (None for a fresh session), for CLIs
    that report cumulative thread usage (codex).
    """

    prompt: str
    worktree: Path
    node_dir: Path
    model: str | None = None
    effort: str | None = None
    resume: str | None = None
    new_session: str | None = None
    budget_usd: float | None = None
    provider: str | None = None
    prior_usage: Usage | None = None


@dataclass(frozen=True)
class Invocation:
    """A ready command line: argv, bytes for stdin (None: /dev/null), and environment
    overrides (a value of None removes the variable)."""

    argv: list[str]
    stdin: bytes | None = None
    env: Mapping[str, str | None] = field(default_factory=dict)


class Backend(Protocol):
    """One agent CLI. ``name`` keys the session map and names ``<agent>.err``."""

    name: str
    #: The agent mints its own session id (fractal cannot choose it up front).
    mints_session: bool
    #: The CLI enforces a dollar budget in flight (claude: --max-budget-usd).
    enforces_budget: bool
    #: A signal the CLI answers by flushing its final event (claude: SIGINT), or None.
    soft_interrupt: int | None
    #: The CLI always ends its stream with a final event: a stream without a
    #: ResultEvent is a failure whatever the exit code (claude, codex).
    requires_result: bool
    #: Provider routes the backend supports (``provider`` config key and frontmatter).
    providers: frozenset[str]

    def binary(self) -> str:
        """The executable that must exist (a bare name on PATH, or a path)."""
        ...

    def invocation(self, request: LaunchRequest) -> Invocation:
        """Build the command line for ``request``."""
        ...

    def env(self, request: LaunchRequest, environ: Mapping[str, str]) -> dict[str, str | None]:
        """Reserved environment for ``request``, applied last over ``environ`` (the agent's
        environment so far); a value of None removes the variable. The caller's own
        settings for these variables never reach the agent."""
        ...

    def parser(self, request: LaunchRequest) -> StreamParser:
        """A fresh parser for one launch of ``request``."""
        ...

    def preflight(self, provider: str | None, env: Mapping[str, str]) -> str | None:
        """Why a launch with route ``provider`` under ``env`` cannot work, or None.

        Checks what the backend itself needs (the route is supported, its key is set);
        the binary on PATH is checked by the caller (``binary_available``).
        """
        ...


def split_agent(setting: str) -> list[str]:
    """Split an ``agent`` setting on whitespace; quotes and backslashes are refused.

    The setting splits on whitespace only, so a word can never contain a space. Raises
    InvalidValue for quotes, backslashes or an empty setting.
    """
    if re.search(r"[\"'\\]", setting):
        raise InvalidValue(f"agent {setting!r}: quotes and backslashes are not supported; "
                           "put the command in a script and name the script")
    words = setting.split()
    if not words:
        raise InvalidValue("agent: empty command")
    return words


def binary_available(binary: str, cwd: Path) -> bool:
    """True when ``binary`` is an executable path (relative to ``cwd``) or found on PATH."""
    return binary_problem(binary, cwd) is None


def binary_problem(binary: str, cwd: Path) -> str | None:
    """Why ``binary`` cannot run, or None: not found (a relative path is looked up in
    ``cwd``, the worktree; a bare name on PATH), or found but not executable."""
    if "/" in binary:
        path = Path(binary) if Path(binary).is_absolute() else cwd / binary
        if not path.is_file():
            return (f"agent binary not found: {binary} (looked for {path}; a relative path is "
                    "resolved in the node's worktree: commit the script on the branch the node "
                    "forks from before `node init`, or use an absolute path)")
        if not path.stat().st_mode & 0o111:
            return f"agent {binary} is not executable (chmod +x {path})"
        return None
    if shutil.which(binary) is None:
        return f"agent binary not found: {binary} (not on PATH)"
    return None


OPENROUTER = "openrouter"
OPENROUTER_KEY_ENV = "OPENROUTER_API_KEY"


def supported_routes(backend: Backend) -> str:
    """``openrouter`` or ``none``: the routes ``backend`` supports, for messages."""
    return ", ".join(sorted(backend.providers)) or "none"


def resolve_route(backend: Backend, explicit: str | None, inherited: str | None) -> str | None:
    """The provider route a launch of ``backend`` uses (``docs/agents.md``).

    ``explicit`` (the step's ``provider:`` frontmatter, or the node's own config for the
    node's backend) must be supported; ``inherited`` (a route set for another backend or
    higher up the tree) is dropped when ``backend`` does not support it. Empty strings
    mean unset. Raises InvalidValue naming the supported set.
    """
    if explicit:
        if explicit not in backend.providers:
            raise InvalidValue(f"provider {explicit!r} is not supported by the {backend.name} "
                               f"backend (supported: {supported_routes(backend)})")
        return explicit
    return inherited if inherited and inherited in backend.providers else None


def route_problem(backend: Backend, provider: str | None, env: Mapping[str, str]) -> str | None:
    """The common part of ``Backend.preflight``: an unsupported route, or a route whose key
    is missing from ``env`` (``openrouter`` needs OPENROUTER_API_KEY). None when fine."""
    if not provider:
        return None
    if provider not in backend.providers:
        return (f"provider {provider!r} is not supported by the {backend.name} backend "
                f"(supported: {supported_routes(backend)})")
    if provider == OPENROUTER and not env.get(OPENROUTER_KEY_ENV):
        return (f"provider openrouter needs {OPENROUTER_KEY_ENV} in the environment of "
                "`fractal node start`; export it and start the node again")
    return None


def sanitize(text: str) -> str:
    """``text`` with lone surrogates (from JSON ``\\ud800`` escapes) replaced, so it can be
    written to the pane and the database; every parsed event's text goes through it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")
    return text
