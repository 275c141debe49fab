"""Failure modes of the real agent CLIs through the real fractal CLI in tmux, driven by
fake ``claude``/``codex`` executables that replay the captured streams with the right exit
codes, timing and signals: a final event then a hang, an escaped grandchild, stderr noise.
HTTP errors, streams without a final event and stalls at the time wall run the loop
in-process (tests/integration/test_loop_processes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import Tree
from tests.e2e.fakes import make_fakes, start_all, step_rows, wait_gone

pytestmark = pytest.mark.e2e

ONE = ("--no-sync", "--max-iters", "1", "--step-retries", "0")


def _node(tree: Tree, name: str, agent: str, body: str, *opts: str) -> None:
    tree.node(name, {"01-WORK.md": body + "\n"}, "--agent", agent, *ONE, *opts)


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
