"""The real pinned Claude Code against the mock's usage window, through the real fractal
CLI and supervisors: two nodes on one subscription credential. The window closes under
node A's step; A waits, B stops launching at its boundary without calling the API; at
the reset exactly one probe goes first, then the other node; both finish, nothing failed.
The same with a probe that hits the wall again, and with the pinned Codex; and a
proactive wait from Claude Code's 96 % warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM
from tests.e2e.conftest import Tree
from tests.helpers import wait_until

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]  # a first install included

STEP = {"01-SAY.md": "Say hi. [mock:text]\n"}
JITTER = 1.0
"""Seconds past a stated reset before the probe launches (``FRACTAL_RESUME_JITTER_S``;
5 by default): each wait here is the window plus this. Not less: the mock states resets
in whole seconds, rounded down, so a probe any earlier than a second past the stated
reset could still meet the window. A node waiting on the other's probe looks every 0.5 s
(``FRACTAL_PROBE_POLL_S``; 3 by default)."""
CLOSED = 6.0
"""Seconds the window stays closed after a's first call. b must be seen waiting before the
probe's first model call, which comes at the window's end plus the resume jitter plus the
probe CLI's start (a second or more); b took 1.3 to 3.6 s from a's first call to its
waiting boundary (recording the window, ``node start``, the supervisor's boot). Each
test waits the whole window once: it is most of what the test controls."""
AGAIN = 3.0
"""Seconds the window closes again when the first probe meets it. Not less: the prober
records the new reset only after its CLI has exited, and a stated reset already past by
then makes the wait the first backoff (60 s) instead."""


def _subscriber_env(home: Path, agent_bin: Path, mock: MockLLM) -> dict[str, str]:
    env = start_env(home, agent_bin, mock, CLAUDE_CODE_OAUTH_TOKEN="dummy",
                    FRACTAL_RESUME_JITTER_S=str(JITTER), FRACTAL_PROBE_POLL_S="0.5")
    env.pop("ANTHROPIC_API_KEY", None)  # a subscriber: the window headers are read
    return env


SESSION_HEADER = {"claude": "x-claude-code-session-id", "codex": "session-id"}
API_PATH = {"claude": "/v1/messages", "codex": "/v1/responses"}


def _session_of(call: dict[str, Any], cli: str) -> str:
    return next((v for k, v in call["headers"].items()
                 if k.lower() == SESSION_HEADER[cli]), "")


def _make_node(tree: Tree, name: str, cli: str, mock: MockLLM) -> None:
    if cli == "claude":
        tree.node(name, STEP, "--agent", "claude", "--model", "claude-opus-4-8", "--no-sync",
                  "--max-iters", "1")
        return
    ndir = tree.node(name, STEP, "--agent", f"codex {CODEX_FLAGS}", "--model", "gpt-5.5",
                     "--no-sync", "--max-iters", "1")
    (ndir / ".codex" / "config.toml").write_text(codex_config(
        mock, request_max_retries=0, stream_max_retries=0))


def _node_of(tree: Tree, session: str) -> str:
    rows = tree.sql("SELECT DISTINCT node FROM steps WHERE session = ?", session)
    return str(rows[0][0]) if rows else "?"


@pytest.mark.parametrize("cli", ["claude", "codex"])
@pytest.mark.parametrize("again", [False, True], ids=["reopens", "probe-hits-the-wall-again"])
def test_two_nodes_on_one_credential_wait_out_one_window(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path,
        again: bool, cli: str) -> None:
    tree = real_tree
    env = _subscriber_env(tmp_path / "home", agent_bin, mock_llm)
    for name in ("a", "b"):
        _make_node(tree, name, cli, mock_llm)
    # The window closes at a's first call for CLOSED seconds; with ``again`` the stated
    # reset drifts: the probe after it meets the window once more, for AGAIN seconds.
    mock_llm.close_window_at_first_call(CLOSED, AGAIN if again else None)
    tree.cli("node", "start", "a", env=env)
    wait_until(lambda: tree.sql("SELECT state FROM usage_windows") == [("closed",)],
               timeout=60, message="a recorded the closed window")
    tree.cli("node", "start", "b", env=env)
    wait_until(lambda: tree.cli("node", "status", "b").stdout.startswith(
        "active (waiting for usage window until"), timeout=60, message="b waiting")
    assert mock_llm.usage_answers() == ["rejected"]  # b never called the API
    assert tree.wait_settled("a", timeout=180) == "completed"
    assert tree.wait_settled("b", timeout=180) == "completed"

    calls = mock_llm.posts(API_PATH[cli])
    answers = mock_llm.usage_answers()
    nodes = [_node_of(tree, _session_of(c, cli)) for c in calls]
    rejected = 2 if again else 1
    assert answers[:rejected] == ["rejected"] * rejected
    assert "rejected" not in answers[rejected:]
    assert nodes[0] == "main.a"
    prober = nodes[rejected - 1]  # the one probe: the rejected repeat, or the first through
    if not again:
        prober = nodes[1]
    first_other = next(i for i, n in enumerate(nodes) if i >= rejected and n != prober)
    assert all(n == prober for n in nodes[rejected:first_other])  # the probe went first
    # after the release the prober may go on with later steps, so calls interleave from here
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]
    assert tree.sql("SELECT node, COUNT(*) FROM iterations GROUP BY node ORDER BY node") == [
        ("main.a", 1), ("main.b", 1)]
    assert tree.sql("SELECT state FROM usage_windows") == [("open",)]


RESETS_IN = 3.0
"""Seconds from the warned call to the window's stated reset: the wait before the second
step lasts at least this minus the second the stated reset is rounded down by, long
enough for a ``node status`` poll to see it."""


def test_a_warning_at_96_percent_waits_for_the_reset_before_the_next_launch(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree = real_tree
    env = _subscriber_env(tmp_path / "home", agent_bin, mock_llm)
    tree.node("w", {"01-SAY.md": "Say hi. [mock:text]\n", "02-MORE.md": "More. [mock:text]\n"},
              "--agent", "claude", "--model", "claude-opus-4-8", "--no-sync", "--max-iters", "1")
    mock_llm.warn_window(0.96, resets_in=RESETS_IN)  # the reset: 4 s after the first call
    tree.cli("node", "start", "w", env=env)
    wait_until(lambda: tree.cli("node", "status", "w").stdout.startswith(
        "active (waiting for usage window until"), timeout=60, message="w waiting early")
    assert len(mock_llm.posts("/v1/messages")) == 1  # the second step did not launch
    assert tree.wait_settled("w", timeout=120) == "completed"
    calls = mock_llm.posts("/v1/messages")
    assert len(calls) >= 2 and mock_llm.warn_reset is not None
    first, second = calls[0], calls[1]
    assert second["at"] >= mock_llm.warn_reset  # the next launch waited for the reset
    assert second["at"] - first["at"] >= RESETS_IN
    assert [s for (s,) in tree.sql("SELECT status FROM steps ORDER BY step_id")] == [
        "completed", "completed"]


CLOCK_CLOSED = 2.0
"""Seconds the window stays closed after the first call when Codex states its reset only
as a clock time to the minute: the reset then falls in the minute of the failure (or, a
call in a minute's last two seconds, early in the next), the case read as tomorrow."""


def test_a_codex_reset_stated_as_this_minute_is_probed_after_the_minute_not_tomorrow(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    """`try again at 12:07 AM` read within 12:07 (``rate_limits.primary: null``): the wait
    ends once that minute is over, and the step resumes within two minutes of the reset,
    never a day later."""
    tree = real_tree
    env = _subscriber_env(tmp_path / "home", agent_bin, mock_llm)
    _make_node(tree, "m", "codex", mock_llm)
    mock_llm.close_window_at_first_call(CLOCK_CLOSED, clock_only=True)
    tree.cli("node", "start", "m", env=env)
    wait_until(lambda: tree.sql("SELECT state FROM usage_windows") == [("closed",)],
               timeout=60, message="m recorded the closed window")
    ((wake_at,),) = tree.sql("SELECT wake_at FROM usage_windows")
    assert tree.wait_settled("m", timeout=240) == "completed"

    reset = mock_llm.window_until
    assert reset is not None
    calls = mock_llm.posts(API_PATH["codex"])
    answers = mock_llm.usage_answers()
    steps = tree.sql("SELECT status, metadata FROM steps ORDER BY step_id")
    during = [c for c in calls if c["at"] < reset]
    after = [c["at"] for c in calls if c["at"] >= reset]
    print(f"codex clock-time window: {len(steps)} launches, {len(calls)} model calls "
          f"({len(during)} during the window), answers {answers}; wake {wake_at - reset:.1f} s "
          f"after the reset, first call through {after[0] - reset:.1f} s after it")
    assert steps[0][0] == "paused" and str(steps[0][1]).startswith("usage limit (unknown) until ")
    assert str(steps[0][1]).endswith(":00Z")  # a minute's end: the clock-time reading
    assert 0 < wake_at - reset <= 62.0  # the minute's end plus the jitter, not tomorrow
    assert after and after[0] - reset <= 120.0
    assert answers[0] == "rejected" and answers[-1] != "rejected"
    assert steps[-1][0] == "completed"
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]
