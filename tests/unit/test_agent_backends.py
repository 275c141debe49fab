"""The claude and codex backends: exact command lines, reserved environment, provider
routes, capabilities and the static backend table."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fractal.agents.base import Backend, LaunchRequest, resolve_route
from fractal.agents.claude import ClaudeBackend
from fractal.agents.codex import CodexBackend
from fractal.agents.command import CommandBackend
from fractal.agents.registry import BACKENDS, backend_names, named_backend, resolve_backend
from fractal.domain.errors import InvalidValue
from tests.stylecheck import imports, module_of, source_files

WT = Path("/nonexistent/wt")
ND = WT / ".fractal" / "main.a"  # no settings file here: --settings is left out


def request(**kw: object) -> LaunchRequest:
    values: dict[str, object] = {"prompt": "-do it", "worktree": WT, "node_dir": ND}
    values.update(kw)
    return LaunchRequest(**values)  # type: ignore[arg-type]


CLAUDE_HEAD = ["claude", "-p", "--output-format", "stream-json", "--verbose"]
CODEX_ROUTE = ["-c", 'model_provider="openrouter"',
               "-c", 'model_providers.openrouter={name="OpenRouter", '
               'base_url="https://openrouter.ai/api/v1", env_key="OPENROUTER_API_KEY", '
               'wire_api="responses", request_max_retries=1, stream_max_retries=1}']


@pytest.mark.parametrize(("req", "argv"), [
    (request(new_session="u-1"), [*CLAUDE_HEAD, "--session-id", "u-1", "--", "-do it"]),
    (request(resume="s-9", new_session="ignored"),
     [*CLAUDE_HEAD, "--resume", "s-9", "--", "-do it"]),
    (request(model="sonnet", effort="high", budget_usd=0.25, new_session="u-1"),
     [*CLAUDE_HEAD, "--model", "sonnet", "--effort", "high", "--max-budget-usd", "0.250000",
      "--session-id", "u-1", "--", "-do it"]),
    (request(), [*CLAUDE_HEAD, "--", "-do it"]),
], ids=["fresh", "resume", "flags", "no-session"])
def test_claude_argv(req: LaunchRequest, argv: list[str]) -> None:
    invocation = ClaudeBackend().invocation(req)
    assert invocation.argv == argv
    assert invocation.stdin is None  # /dev/null


def test_claude_extra_words_follow_the_binary() -> None:
    argv = ClaudeBackend(["--permission-mode", "acceptEdits"]).invocation(request()).argv
    assert argv[:3] == ["claude", "--permission-mode", "acceptEdits"] and argv[3] == "-p"


@pytest.mark.parametrize(("req", "argv"), [
    (request(), ["codex", "exec", "--json", "-C", str(WT), "--", "-do it"]),
    (request(resume="t-1"), ["codex", "exec", "resume", "t-1", "--json", "--", "-do it"]),
    (request(model="gpt-5.5", effort="high"),
     ["codex", "exec", "--json", "-C", str(WT), "-m", "gpt-5.5",
      "-c", 'model_reasoning_effort="high"', "--", "-do it"]),
    (request(provider="openrouter"),
     ["codex", "exec", "--json", "-C", str(WT), *CODEX_ROUTE, "--", "-do it"]),
    (request(resume="t-1", provider="openrouter"),
     ["codex", "exec", "resume", "t-1", "--json", *CODEX_ROUTE, "--", "-do it"]),
], ids=["fresh", "resume", "flags", "openrouter", "resume-openrouter"])
def test_codex_argv(req: LaunchRequest, argv: list[str]) -> None:
    invocation = CodexBackend().invocation(req)
    assert invocation.argv == argv
    assert invocation.stdin is None  # /dev/null: a piped stdin is appended to the prompt


@pytest.mark.parametrize(("toml", "flags"), [
    ('model_provider = "mock"\n[model_providers.mock]\nname = "mock"\n',
     ["-c", "model_providers.mock.request_max_retries=1",
      "-c", "model_providers.mock.stream_max_retries=1"]),
    ('model_provider = "mock"\n[model_providers.mock]\nrequest_max_retries = 0\n'
     "stream_max_retries = 9\n",  # a lower bound of the file's own is kept
     ["-c", "model_providers.mock.request_max_retries=0",
      "-c", "model_providers.mock.stream_max_retries=1"]),
    ('model_provider = "openai"\n', []),  # the built-in provider: left as Codex has it
    ("[model_providers.mock]\nname = 'mock'\n", []),  # none selected
    ("not toml = = =", []),
    (None, []),
], ids=["custom", "lower-kept", "built-in", "unselected", "broken", "no-file"])
def test_codex_bounds_its_own_retries(tmp_path: Path, toml: str | None,
                                      flags: list[str]) -> None:
    home = tmp_path / "nd" / ".codex"
    home.mkdir(parents=True)
    if toml is not None:
        (home / "config.toml").write_text(toml)
    argv = CodexBackend().invocation(request(node_dir=tmp_path / "nd")).argv
    assert argv == ["codex", "exec", "--json", "-C", str(WT), *flags, "--", "-do it"]


def test_codex_extra_words_follow_exec_before_resume() -> None:
    argv = CodexBackend(["--skip-git-repo-check"]).invocation(request(resume="t")).argv
    assert argv[:5] == ["codex", "exec", "--skip-git-repo-check", "resume", "t"]


ENV = {"OPENROUTER_API_KEY": "sk-or", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}


@pytest.mark.parametrize(("backend", "req", "reserved"), [
    (ClaudeBackend(), request(),
     {"CLAUDE_EFFORT": None, "CLAUDE_CODE_EFFORT_LEVEL": None}),
    (ClaudeBackend(), request(provider="openrouter"),
     {"CLAUDE_EFFORT": None, "CLAUDE_CODE_EFFORT_LEVEL": None,
      "ANTHROPIC_BASE_URL": "https://openrouter.ai/api", "ANTHROPIC_AUTH_TOKEN": "sk-or",
      "ANTHROPIC_API_KEY": ""}),
    (CodexBackend(), request(), {"CODEX_HOME": str(ND / ".codex")}),
    (CodexBackend(), request(provider="openrouter"), {"CODEX_HOME": str(ND / ".codex")}),
], ids=["claude-native", "claude-openrouter", "codex", "codex-openrouter"])
def test_reserved_env(backend: Backend, req: LaunchRequest,
                      reserved: dict[str, str | None]) -> None:
    assert backend.env(req, ENV) == reserved


@pytest.mark.parametrize(("backend", "mints", "budget", "soft", "requires"), [
    (ClaudeBackend(), False, True, signal.SIGINT, True),
    (CodexBackend(), True, False, None, True),
    (CommandBackend(["x"], WT), True, False, None, False),
], ids=["claude", "codex", "command"])
def test_capabilities(backend: Backend, mints: bool, budget: bool, soft: int | None,
                      requires: bool) -> None:
    assert (backend.mints_session, backend.enforces_budget, backend.soft_interrupt,
            backend.requires_result) == (mints, budget, soft, requires)


def test_registry_resolves_the_builtins_and_passes_extra_words() -> None:
    assert {"claude", "codex"} <= set(backend_names())
    backend = resolve_backend("codex --skip-git-repo-check", WT)
    assert isinstance(backend, CodexBackend) and backend.extra == ["--skip-git-repo-check"]
    assert isinstance(resolve_backend(None, WT), ClaudeBackend)  # the default agent
    assert isinstance(resolve_backend("./my-agent", WT), CommandBackend)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_row_of_the_table_builds_a_backend_of_that_name(name: str) -> None:
    backend = named_backend(name, ["--extra"])
    assert backend is not None and backend.name == name
    assert named_backend("no-such-backend", []) is None


def _agent_imports() -> dict[str, set[str]]:
    """Module -> the fractal.agents modules it imports (anywhere in the file)."""
    graph: dict[str, set[str]] = {}
    for path in source_files("fractal/agents"):
        graph[module_of(path)] = {site.name for site in imports(path)}
    return {mod: {m for m in graph if any(n == m or n.startswith(m + ".") for n in names)
                  and m != mod and m != "fractal.agents"}
            for mod, names in graph.items()}


def test_the_agent_modules_import_each_other_without_a_cycle() -> None:
    """base is imported by every backend and imports none of them; the table imports the
    backends only when a setting names one."""
    graph = _agent_imports()
    assert not graph["fractal.agents.base"]
    seen: dict[str, int] = {}  # 1: on the current path, 2: finished

    def visit(mod: str, path: tuple[str, ...]) -> None:
        assert seen.get(mod) != 1, f"import cycle: {' -> '.join((*path, mod))}"
        if seen.get(mod) == 2:
            return
        seen[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            visit(dep, (*path, mod))
        seen[mod] = 2

    for mod in sorted(graph):
        visit(mod, ())


@pytest.mark.parametrize(("backend", "explicit", "inherited", "route"), [
    (ClaudeBackend(), None, None, None),
    (ClaudeBackend(), "openrouter", None, "openrouter"),
    (CodexBackend(), None, "openrouter", "openrouter"),
    (CommandBackend(["x"], WT), None, "openrouter", None),  # inherited: dropped
    (ClaudeBackend(), "", "openrouter", "openrouter"),
], ids=["none", "explicit", "inherited", "inherited-dropped", "empty-explicit"])
def test_resolve_route(backend: Backend, explicit: str | None, inherited: str | None,
                       route: str | None) -> None:
    assert resolve_route(backend, explicit, inherited) == route


@pytest.mark.parametrize(("backend", "supported"), [
    (ClaudeBackend(), "openrouter"), (CommandBackend(["x"], WT), "none")])
def test_an_explicit_unsupported_route_is_refused_naming_the_supported_set(
        backend: Backend, supported: str) -> None:
    with pytest.raises(InvalidValue, match=rf"provider 'bedrock' .*\(supported: {supported}\)"):
        resolve_route(backend, "bedrock", None)


@pytest.mark.parametrize(("provider", "env", "problem"), [
    (None, {}, None),
    ("openrouter", {"OPENROUTER_API_KEY": "k"}, None),
    ("openrouter", {}, "OPENROUTER_API_KEY"),
    ("openrouter", {"OPENROUTER_API_KEY": ""}, "OPENROUTER_API_KEY"),
    ("vertex", {}, "not supported"),
])
@pytest.mark.parametrize("make", [ClaudeBackend, CodexBackend], ids=["claude", "codex"])
def test_preflight(make: type[ClaudeBackend] | type[CodexBackend], provider: str | None,
                   env: dict[str, str], problem: str | None) -> None:
    found = make().preflight(provider, env)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_parsers_follow_the_request() -> None:
    # codex subtracts the thread's prior usage only when it resumes that thread
    assert CodexBackend().parser(request(resume="t", prior_usage=(1, 0, 1))).prior == (1, 0, 1)
    assert CodexBackend().parser(request(prior_usage=(1, 0, 1))).prior is None
    assert ClaudeBackend().parser(request()).cli_priced
    assert not ClaudeBackend().parser(request(provider="openrouter")).cli_priced
