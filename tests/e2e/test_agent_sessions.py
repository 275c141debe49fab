"""Sessions, usage, retries and per-step overrides of the real-CLI backends, end to end with
fake ``claude``/``codex`` executables (issue 3: Backends; seed: Continuous and detached
modes, Retries and backoff, What gets recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.e2e.fakes import make_fakes, start_all, step_rows

pytestmark = pytest.mark.e2e


def _session_flag(argv: list[str]) -> tuple[str, str]:
    flag = "--resume" if "--resume" in argv else "--session-id"
    return flag, argv[argv.index(flag) + 1]


def test_claude_session_is_resumed_within_an_iteration_and_fresh_at_the_next(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    steps = {"01-MAKE.md": "---\neffort: high\n---\nMake it. [fake:claude-tool-success]\n",
             "02-CHECK.md": "Check it. [fake:claude-resume]\n"}
    ndir = tree.node("cont", steps, "--agent", "claude", "--no-sync", "--max-iters", "2",
                     "--model", "opus")
    start_all(tree, ["cont"], fakes.env(CLAUDE_EFFORT="low", CLAUDE_CODE_EFFORT_LEVEL="low"))
    assert tree.status("cont") == "completed"
    calls = fakes.calls("claude")
    flags = [_session_flag(c["argv"]) for c in calls]
    (f1, s1), (f2, s2), (f3, s3), (f4, s4) = flags
    assert (f1, f2, f3, f4) == ("--session-id", "--resume", "--session-id", "--resume")
    assert s1 == s2 and s3 == s4 and s1 != s3
    argv = calls[0]["argv"]
    assert argv[1:5] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert argv[argv.index("--model") + 1] == "opus"
    assert argv[argv.index("--effort") + 1] == "high"
    assert argv[argv.index("--settings") + 1] == str(ndir / ".claude" / "settings.json")
    assert argv[-2] == "--" and "Make it." in argv[-1]
    assert "--effort" not in calls[1]["argv"]  # frontmatter effort is that step's only
    for call in calls:
        assert call["stdin_devnull"] and call["cwd"] == str(tree.worktree("cont"))
        assert "CLAUDE_EFFORT" not in call["env"] and "CLAUDE_CODE_EFFORT_LEVEL" not in call["env"]
    rows = tree.sql("SELECT session, cost, model, input_tokens, output_tokens FROM steps "
                    "ORDER BY step_id")
    # total_cost_usd is per process: each resumed launch records its own 0.015
    assert rows == [(s1, 0.015, "claude-opus-4-8", 2000, 200)] * 2 + \
        [(s3, 0.015, "claude-opus-4-8", 2000, 200)] * 2
    assert tree.sql("SELECT session FROM iterations ORDER BY iter") == [(s1,), (s3,)]


def test_codex_resume_records_its_own_usage_and_no_cost(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    steps = {"01-MAKE.md": "Make it. [fake:codex-tool-success]\n",
             "02-AGAIN.md": "---\nmodel: gpt-5.5\n---\nAgain. [fake:codex-resume]\n"}
    ndir = tree.node("cdx", steps, "--agent", "codex", "--no-sync", "--max-iters", "1")
    start_all(tree, ["cdx"], fakes.env())
    assert tree.status("cdx") == "completed"
    first, second = fakes.calls("codex")
    assert first["argv"][1:5] == ["exec", "--json", "-C", str(tree.worktree("cdx"))]
    rows = step_rows(tree, "cdx")
    thread = rows[0][-1]
    assert second["argv"][1:] == ["exec", "resume", thread, "--json", "-m", "gpt-5.5", "--",
                                  second["prompt"]]
    assert all(c["env"]["CODEX_HOME"] == str(ndir / ".codex") and c["stdin_devnull"]
               for c in (first, second))
    # turn.completed usage is cumulative over the thread (2000/200, then 4000/400):
    # each launch records its own share, and codex reports no dollars.
    assert [r[4:9] for r in rows] == [(None, 2000, 0, 200, thread)] * 2


def test_failed_launches_retry_with_retry_rows_and_numbered_snapshots(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)  # failures a later launch will not get past: retried
    steps = {"01-WORK.md": "[fake:claude-http401] [fake:claude-http400] [fake:claude-text-only]\n"}
    tree.node("retry", steps, "--agent", "claude", "--no-sync", "--max-iters", "1",
              "--step-retries", "2", "--step-retry-backoff", "1s")
    start_all(tree, ["retry"], fakes.env())
    rows = [r[:5] for r in step_rows(tree, "retry")]
    assert [r[1:3] for r in rows] == [("failed", 1), ("failed", 1), ("completed", 0)]
    assert rows[0][3].startswith("agent error: auth (HTTP 401)")
    assert rows[1][3].startswith("agent error: bad_request (HTTP 400): API Error: 400")
    assert rows[1][3].endswith("; retry") and rows[2][3] == "retry"
    assert [r[4] for r in rows] == [0.0, 0.0, 0.0075]
    run_id = tree.sql("SELECT run_id FROM runs")[0][0]
    snapshots = sorted(p.name for p in (tree.node_dir("retry") / "tmp" / "err").iterdir())
    assert snapshots == [f"{run_id}-1-1-2.err", f"{run_id}-1-1.err"]
    # the retry resumed the session the failed attempt had started
    flags = [_session_flag(c["argv"])[0] for c in fakes.calls("claude")]
    assert flags == ["--session-id", "--resume", "--resume"]


def test_a_provider_outage_is_waited_out_without_spending_a_retry(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    steps = {"01-WORK.md": "[fake:claude-http500] [fake:claude-http529] [fake:claude-text-only]\n"}
    ndir = tree.node("outage", steps, "--agent", "claude", "--no-sync", "--max-iters", "1",
                     "--step-retries", "0")
    config = json.loads((ndir / "config.json").read_text())
    (ndir / "config.json").write_text(json.dumps({**config, "outage_backoff": "1s"}))
    start_all(tree, ["outage"], fakes.env())
    assert tree.status("outage") == "completed"  # no retries, yet the same run went on
    rows = [r[:5] for r in step_rows(tree, "outage")]
    assert [r[1:3] for r in rows] == [("failed", 1), ("failed", 1), ("completed", 0)]
    assert rows[0][3].startswith("agent error: server_error (HTTP 500): API Error: 500")
    assert rows[1][3].startswith("agent error: overloaded (HTTP 529)")
    assert not any(r[3].endswith("retry") for r in rows)  # an outage spends no retry
    assert tree.sql("SELECT status FROM iterations") == [("completed",)]
    flags = [_session_flag(c["argv"])[0] for c in fakes.calls("claude")]
    assert flags == ["--session-id", "--resume", "--resume"]  # the session goes on


def test_an_override_to_a_missing_binary_fails_the_step_not_the_run(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path, clis=("claude",))  # no codex on PATH
    steps = {"01-OTHER.md": "---\nagent: codex\n---\nUse codex. [fake:codex-text-only]\n",
             "02-NEXT.md": "Next. [fake:claude-text-only]\n"}
    tree.node("mix", steps, "--agent", "claude", "--no-sync", "--max-iters", "2")
    start_all(tree, ["mix"], fakes.env())
    rows = [r[:4] for r in step_rows(tree, "mix")]
    missing = ("OTHER", "failed", 127, "agent binary not found: codex (not on PATH) (from the "
               "step's agent: frontmatter)")
    assert rows == [missing, ("NEXT", "stopped", 0, "failed on OTHER")] * 2
    assert tree.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("exited", 1, "Reached max iterations (2); final iteration failed")]


def test_openrouter_route_reaches_the_agent_and_prices_nothing(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    tree.node("routed", {"01-A.md": "[fake:claude-text-only]\n",
                         "02-B.md": f"---\nagent: {tree.agent}\n---\n[stub:cost=0.01]\n"},
              "--agent", "claude", "--provider", "openrouter", "--no-sync", "--max-iters", "1")
    start_all(tree, ["routed"], fakes.env(OPENROUTER_API_KEY="sk-or-test",
                                          ANTHROPIC_API_KEY="sk-ant-native"))
    env = fakes.calls("claude")[0]["env"]
    assert (env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_AUTH_TOKEN"], env["ANTHROPIC_API_KEY"]) \
        == ("https://openrouter.ai/api", "sk-or-test", "")
    rows = [r[:8] for r in step_rows(tree, "routed")]
    # claude's own figure is at Anthropic's rates: NULL until priced; tokens recorded.
    # The inherited route is dropped for the command override, which runs unrouted.
    assert rows == [("A", "completed", 0, "", None, 1000, 0, 100),
                    ("B", "completed", 0, "", 0.01, None, None, None)]


def test_routes_without_their_key_or_unsupported_are_refused_clearly(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    env = {k: v for k, v in fakes.env().items() if k != "OPENROUTER_API_KEY"}
    tree.node("nokey", {"01-A.md": "[fake:claude-text-only]\n"}, "--agent", "claude",
              "--provider", "openrouter", "--no-sync", "--max-iters", "1")
    tree.node("steps", {"01-A.md": "---\nprovider: openrouter\n---\n[fake:claude-text-only]\n",
                        "02-B.md": "[fake:claude-text-only]\n"},
              "--agent", "claude", "--no-sync", "--max-iters", "1", "--step-retries", "0")
    tree.node("badstep", {"01-A.md": "---\nprovider: bedrock\n---\n[fake:claude-text-only]\n"},
              "--agent", "claude", "--no-sync", "--max-iters", "1")
    tree.node("bad", {"01-A.md": "x\n"}, "--agent", "codex", "--provider", "bedrock")
    refused = tree.cli("node", "start", "bad", env=env, check=False)
    assert refused.returncode == 1 and tree.status("bad") == "idle"
    assert "provider 'bedrock' is not supported by the codex backend (supported: openrouter)" \
        in refused.stderr
    start_all(tree, ["nokey", "steps", "badstep"], env)
    (status, code, meta), = tree.sql("SELECT status, exit_code, metadata FROM runs "
                                     "WHERE node = 'main.nokey'")
    assert (status, code) == ("exited", 1) and "OPENROUTER_API_KEY" in meta
    assert step_rows(tree, "nokey") == []  # preflight: nothing launched
    rows = [r[:4] for r in step_rows(tree, "steps")]
    assert rows[0][:3] == ("A", "failed", 1) and "OPENROUTER_API_KEY" in rows[0][3]
    assert rows[1] == ("B", "stopped", 0, "failed on A")
    (name, status, code, meta), = [r[:4] for r in step_rows(tree, "badstep")]
    assert (name, status, code) == ("A", "failed", 1)
    assert "provider 'bedrock' is not supported by the claude backend (supported: openrouter)" \
        in meta
    assert fakes.calls("claude") == []  # nothing was launched anywhere


def test_start_environment_reaches_only_that_nodes_agent(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    for name in ("alpha", "beta"):
        tree.node(name, {"01-A.md": f"{name} [fake:claude-text-only]\n"}, "--agent", "claude",
                  "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "alpha", env=fakes.env(ALPHA_SECRET="a-key"))
    tree.wait_settled("alpha")
    tree.cli("node", "start", "beta", env=fakes.env(BETA_SECRET="b-key"))
    tree.wait_settled("beta")
    envs = {"alpha" if "alpha [fake:" in c["prompt"] else "beta": c
            for c in fakes.calls("claude")}
    assert envs["alpha"]["env"]["ALPHA_SECRET"] == "a-key"
    assert "BETA_SECRET" not in envs["alpha"]["env"]
    assert envs["beta"]["env"]["BETA_SECRET"] == "b-key"
    assert "ALPHA_SECRET" not in envs["beta"]["env"]  # not through the shared tmux server
    assert all("a-key" not in " ".join(c["argv"]) for c in envs.values())  # never in argv
