"""The pinned Claude Code and Codex against a provider outage of the mock (every model call
answered HTTP 529, or 500, for a while), through the real fractal CLI and supervisors: the
node waits the outage out with its doubling back-off (5 s first here) and completes in the
same run, no failed iteration, a handful of launches. Codex's own retry loop is the one
fractal bounds (its provider table here sets no retry keys of its own).

Each test prints what the outage cost (``-s`` shows it): the launches and the model calls
while the provider was down.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM
from tests.e2e.conftest import Tree

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]  # a first install included

STEP = {"01-SAY.md": "Say hi. [mock:text]\n"}
API_PATH = {"claude": "/v1/messages", "codex": "/v1/responses"}
FIRST_WAIT = "5s"
"""``outage_backoff``: the waits are 5, 10, 20, 40 s ... so a 90 s outage takes about five
launches whatever the CLI's start-up costs."""
MAX_LAUNCHES = 8


def _node(tree: Tree, cli: str, mock: MockLLM) -> None:
    if cli == "claude":
        ndir = tree.node("o", STEP, "--agent", "claude", "--model", "claude-opus-4-8",
                         "--no-sync", "--max-iters", "1", "--step-retries", "0")
    else:
        ndir = tree.node("o", STEP, "--agent", f"codex {CODEX_FLAGS}", "--model", "gpt-5.5",
                         "--no-sync", "--max-iters", "1", "--step-retries", "0")
        (ndir / ".codex" / "config.toml").write_text(codex_config(mock))  # Codex's defaults
    config = json.loads((ndir / "config.json").read_text())
    config.update(outage_backoff=FIRST_WAIT, max_failed_iters=1)  # one failure would end it
    (ndir / "config.json").write_text(json.dumps(config, indent=2))


@pytest.mark.parametrize(("status", "lasting"), [(529, 90.0), (500, 30.0)],
                         ids=["http529-90s", "http500-30s"])
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_a_provider_outage_is_waited_out_in_the_same_run(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path, cli: str,
        status: int, lasting: float) -> None:
    tree = real_tree
    _node(tree, cli, mock_llm)
    mock_llm.outage_at_first_call(status, lasting)
    tree.cli("node", "start", "o", env=start_env(tmp_path / "home", agent_bin, mock_llm))
    assert tree.wait_settled("o", timeout=lasting + 300) == "completed"

    assert tree.sql("SELECT status, metadata FROM runs") == [
        ("completed", "Reached max iterations (1)")]  # one run, ended as without the outage
    assert tree.sql("SELECT status FROM iterations") == [("completed",)]
    rows = tree.sql("SELECT status, metadata FROM steps ORDER BY step_id")
    failed = [meta for st, meta in rows if st == "failed"]
    assert [st for st, _ in rows] == ["failed"] * len(failed) + ["completed"]
    assert all(m.startswith("agent error: ") and not m.endswith("retry") for m in failed)
    assert 2 <= len(failed) <= MAX_LAUNCHES, failed
    waits = tree.sql("SELECT metadata FROM events WHERE event = 'outage_wait' AND "
                     "status = 'started' ORDER BY event_id")
    assert [w[0].split("attempt ")[1].split(")")[0] for w in waits] == [
        str(n) for n in range(1, len(failed) + 1)]  # one wait per failed launch, counted
    assert tree.sql("SELECT COUNT(*) FROM provider_outages") == [(0,)]  # over

    calls = mock_llm.posts(API_PATH[cli])
    down = [c for c in calls if c["answer"].get("status") == status]
    assert mock_llm.outage_until is not None
    print(f"\n{cli} HTTP {status} outage of {lasting:.0f}s: {len(failed)} launches failed "
          f"during it, {len(down)} model calls answered {status}, {len(calls)} model calls "
          f"in all; waits: {[w[0] for w in waits]}")
