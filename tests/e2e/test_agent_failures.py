"""Every failure mode of the real agent CLIs, through the real fractal CLI, driven by fake
``claude``/``codex`` executables that replay the captured streams with the right exit codes,
timing and signals (issue 3: Failure modes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.e2e.fakes import make_fakes, start_all, step_rows, wait_gone

pytestmark = pytest.mark.e2e

ONE = ("--no-sync", "--max-iters", "1", "--step-retries", "0")


def _node(tree: Tree, name: str, agent: str, body: str, *opts: str) -> None:
    tree.node(name, {"01-WORK.md": body + "\n"}, "--agent", agent, *ONE, *opts)


HTTP = [
    ("c429", "claude", "claude-http429",
     "agent error: rate_limit (HTTP 429): API Error: Request rejected (429)", 0.0),
    ("c529", "claude", "claude-http529", "agent error: overloaded (HTTP 529): API Error: 529", 0.0),
    ("c401", "claude", "claude-http401",
     "agent error: auth (HTTP 401): Failed to authenticate. API Error: 401", 0.0),
    ("c400", "claude", "claude-http400", "agent error: bad_request (HTTP 400): API Error: 400", 0.0),
    ("x429", "codex", "codex-http429",
     "agent error: rate_limit (HTTP 429): exceeded retry limit, last status: 429", None),
    ("x401", "codex", "codex-http401", "agent error: auth (HTTP 401): unexpected status 401", None),
    ("x400", "codex", "codex-http400",
     "agent error: bad_request: invalid_request_error: mock: scripted HTTP 400", None),
    ("x500", "codex", "codex-http500", "agent error: overloaded: We’re currently experiencing",
     None),
]


def test_http_errors_fail_the_step_with_their_class_status_and_message(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    for name, agent, fixture, _, _ in HTTP:
        _node(tree, name, agent, f"Work. [fake:{fixture}]")
    statuses = start_all(tree, [n for n, *_ in HTTP], fakes.env())
    for name, _, _, prefix, cost in HTTP:
        assert statuses[name] == "exited"
        (step, status, code, meta, recorded, *_), = step_rows(tree, name)
        assert (step, status, code) == ("WORK", "failed", 1), meta
        assert meta.startswith(prefix), meta
        assert recorded == cost  # claude reported $0; codex reports no dollars: NULL


def test_a_stream_without_a_final_event_fails_whatever_the_exit_code(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    _node(tree, "zero", "claude", "[fake:claude-tool-success] [fake:truncate=4] [fake:exit=0]")
    _node(tree, "term", "claude", "[fake:claude-sigterm-tool]")
    _node(tree, "cdx", "codex", "[fake:codex-sigint-tool]")
    start_all(tree, ["zero", "term", "cdx"], fakes.env())
    (_, status, code, meta, cost, tokens, _, _, session), = step_rows(tree, "zero")
    # the CLI opened a session and reported no cost: its spend is unknown
    assert (status, code, meta) == ("failed", 1,
                                    "stream ended without a result (exit 0); unpriced")
    assert (cost, tokens) == (None, None)  # nothing reported: unknown, never 0
    assert session == fakes.calls("claude")[0]["argv"][-3]  # the echoed --session-id
    (_, status, code, meta, *_), = step_rows(tree, "term")
    assert (status, code, meta) == ("failed", 143, "stream ended without a result (exit 143); unpriced")
    (_, status, code, meta, cost, *_), = step_rows(tree, "cdx")
    assert (status, code) == ("failed", 1) and cost is None
    assert meta.startswith("stream ended without a result (exit 1): ")  # + the stderr tail


def test_final_event_then_hang_is_recorded_by_the_final_event(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    _node(tree, "hangc", "claude", "[fake:claude-tool-success] [fake:hang-after]",
          "--step-timeout", "2m")
    _node(tree, "hangx", "codex", "[fake:codex-text-only] [fake:hang-after]",
          "--step-timeout", "2m")
    start_all(tree, ["hangc", "hangx"], fakes.env())
    (_, status, code, meta, cost, *tokens, _), = step_rows(tree, "hangc")
    assert (status, code, meta, cost, tokens) == ("completed", 0, "", 0.015, [2000, 0, 200])
    (_, status, code, meta, cost, *tokens, _), = step_rows(tree, "hangx")
    assert (status, code, meta, cost, tokens) == ("completed", 0, "", None, [1000, 0, 100])
    durations = tree.sql("SELECT (julianday(ended_at) - julianday(started_at)) * 86400 "
                         "FROM steps")
    assert all(3 < d < 60 for (d,) in durations)  # the short grace, not the 2 m limit


def test_stalls_hit_the_time_wall_and_claude_flushes_its_cost_on_sigint(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    pid_file = tmp_path / "tool.pid"
    _node(tree, "sigint", "claude",
          f"[fake:claude-sigint-tool] [fake:stall] [fake:grandchild={pid_file}]",
          "--step-timeout", "2s")
    _node(tree, "stallx", "codex", "[fake:codex-sigterm-midstream] [fake:stall]",
          "--step-timeout", "2s")
    _node(tree, "deaf", "codex", "[fake:codex-sigterm-tool] [fake:stall] [fake:ignore-term]",
          "--step-timeout", "1s")
    start_all(tree, ["sigint", "stallx", "deaf"], fakes.env())
    (_, status, code, meta, cost, *tokens, _), = step_rows(tree, "sigint")
    # SIGINT first: the CLI printed its final result, so the cost of the run is kept.
    assert (status, code, meta, cost, tokens) == ("exited", 124, "timed out", 0.0075,
                                                  [1000, 0, 100])
    for name in ("stallx", "deaf"):
        (_, status, code, meta, cost, *_), = step_rows(tree, name)
        assert (status, code, meta, cost) == ("exited", 124, "timed out; unpriced", None)
    wait_gone(pid_file)  # the Bash-tool grandchild in its own session did not survive
    assert not [c for c in fakes.calls("codex") + fakes.calls("claude")
                if not c["stdin_devnull"]]


def test_bash_tool_grandchild_outside_the_group_is_reaped(tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    pid_file = tmp_path / "grandchild.pid"
    _node(tree, "tool", "claude", f"[fake:grandchild={pid_file}] [fake:claude-tool-success]")
    start_all(tree, ["tool"], fakes.env())
    assert step_rows(tree, "tool")[0][1] == "completed"
    wait_gone(pid_file)


def test_stderr_noise_bad_bytes_and_huge_lines_are_never_events(
        tree: Tree, tmp_path: Path) -> None:
    fakes = make_fakes(tmp_path)
    _node(tree, "noisy", "claude",
          "[fake:noise] [fake:badutf8] [fake:longline=9] [fake:claude-text-only]")
    start_all(tree, ["noisy"], fakes.env(), timeout=120)
    (_, status, code, meta, cost, *_, session), = step_rows(tree, "noisy")
    assert (status, code, meta, cost) == ("completed", 0, "", 0.0075)  # not stderr's 99.0
    assert session != "from-stderr"
    err = (tree.node_dir("noisy") / "claude.err").read_bytes()
    assert b"from-stderr" in err and b"\xff\xfe" in err  # captured as is, never parsed
