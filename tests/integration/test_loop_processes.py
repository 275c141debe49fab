"""The loop in-process with real agent processes (the stub agent, the fake CLIs) and the
system clock: what only a real process shows, without a tmux pane. Moved down from
tests/e2e (test_bad_input.py, test_agent_failures.py), same assertions."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from tests.e2e.fakes import Fakes, make_fakes, step_rows, wait_gone
from tests.loopfakes import LoopTree, real_loop_tree

__all__ = ["real_loop_tree"]


def _stub_processes(t: LoopTree) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        try:
            values = " ".join(proc.environ().values())
        except psutil.Error:
            continue
        if "agent_stub.py" in cmd and str(t.repo) in values:
            found.append(proc.pid)
    return found


def test_flood_and_invalid_utf8_do_not_break_the_loop(real_loop_tree: LoopTree) -> None:
    t = real_loop_tree
    steps = {"01-FLOOD.md": "[stub:flood=50] [stub:badutf8] [stub:longline=12] [stub:cost=0.5]"}
    t.node("flood", steps, "--no-sync", "--max-iters", "1")
    t.run("flood")
    assert t.status("flood") == "completed"
    assert t.sql("SELECT status, cost FROM steps") == [("completed", 0.5)]


def test_agent_ignoring_sigterm_is_killed_at_the_limit(real_loop_tree: LoopTree) -> None:
    t = real_loop_tree
    steps = {"01-STUBBORN.md": "[stub:ignore-term] [stub:hang]"}
    t.node("stubborn", steps, "--no-sync", "--max-iters", "1", "--step-timeout", "1s")
    t.run("stubborn")
    assert t.status("stubborn") == "exited"
    assert t.steps("stubborn") == [("STUBBORN", "exited", 124, "timed out; unpriced")]
    assert not _stub_processes(t)


# -- the real agent CLIs' failure modes, through fake ``claude``/``codex`` executables that
# replay captured streams with the right exit codes, timing and signals (moved down from
# tests/e2e/test_agent_failures.py, same assertions) -----------------------------------

ONE = ("--no-sync", "--max-iters", "1", "--step-retries", "0")


def _fakes(tmp_path: Path) -> Fakes:
    """The fake CLIs first on PATH of this process (the launch environment of an
    in-process run), with a 1 s kill grace."""
    fakes = make_fakes(tmp_path)
    os.environ.update(fakes.env())
    return fakes


def _node(tree: LoopTree, name: str, agent: str, body: str, *opts: str) -> None:
    tree.node(name, {"01-WORK.md": body + "\n"}, "--agent", agent, *ONE, *opts)


def _run_all(tree: LoopTree, names: list[str], _env: object,
             timeout: float = 60) -> dict[str, str]:
    """Run every node in turn (in this process); return their statuses."""
    for name in names:
        tree.run(name)
    return {name: tree.status(name) for name in names}


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


OUTAGES = {"c429", "c529", "x429", "x500"}
"""The transient classes: a provider outage, waited out; the others fail the run."""


def test_http_errors_fail_the_step_with_their_class_status_and_message(
        real_loop_tree: LoopTree, tmp_path: Path) -> None:
    tree = real_loop_tree
    fakes = _fakes(tmp_path)
    for name, agent, fixture, _, _ in HTTP:
        # an outage is waited out (1 s here) and the step launched again: it gets through
        then = f" [fake:{agent}-text-only]" if name in OUTAGES else ""
        _node(tree, name, agent, f"Work. [fake:{fixture}]{then}")
        tree.set_config(name, outage_backoff="1s")
    statuses = _run_all(tree, [n for n, *_ in HTTP], fakes.env())
    for name, _, _, prefix, cost in HTTP:
        rows = step_rows(tree, name)
        assert statuses[name] == ("completed" if name in OUTAGES else "exited"), rows
        (step, status, code, meta, recorded, *_) = rows[0]
        assert (step, status, code) == ("WORK", "failed", 1), meta
        assert meta.startswith(prefix), meta
        assert recorded == cost  # claude reported $0; codex reports no dollars: NULL
        assert [r[1] for r in rows[1:]] == (["completed"] if name in OUTAGES else [])


def test_a_stream_without_a_final_event_fails_whatever_the_exit_code(
        real_loop_tree: LoopTree, tmp_path: Path) -> None:
    tree = real_loop_tree
    fakes = _fakes(tmp_path)
    _node(tree, "zero", "claude", "[fake:claude-tool-success] [fake:truncate=4] [fake:exit=0]")
    _node(tree, "term", "claude", "[fake:claude-sigterm-tool]")
    _node(tree, "cdx", "codex", "[fake:codex-sigint-tool]")
    _run_all(tree, ["zero", "term", "cdx"], fakes.env())
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


def test_stalls_hit_the_time_wall_and_claude_flushes_its_cost_on_sigint(
        real_loop_tree: LoopTree, tmp_path: Path) -> None:
    tree = real_loop_tree
    fakes = _fakes(tmp_path)
    pid_file = tmp_path / "tool.pid"
    _node(tree, "sigint", "claude",
          f"[fake:claude-sigint-tool] [fake:stall] [fake:grandchild={pid_file}]",
          "--step-timeout", "2s")
    _node(tree, "stallx", "codex", "[fake:codex-sigterm-midstream] [fake:stall]",
          "--step-timeout", "2s")
    _node(tree, "deaf", "codex", "[fake:codex-sigterm-tool] [fake:stall] [fake:ignore-term]",
          "--step-timeout", "1s")
    _run_all(tree, ["sigint", "stallx", "deaf"], fakes.env())
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
