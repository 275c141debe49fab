"""The stream pump and collector on captured streams: what reaches the step row (cost,
tokens, session, model), what the pane shows (API retries counted), and that odd bytes
and over-long lines never break parsing (runtime.agentstream)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from fractal.agents.base import StreamParser
from fractal.agents.claude_stream import ClaudeParser
from fractal.agents.codex_stream import CodexParser
from fractal.runtime.agentstream import MAX_LINE_BYTES, Collector, StreamPump
from fractal.store.ledger import Ledger
from tests.fakes import RecordingReporter

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
NODE = "main.agent"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "fractal.db")


def _pump(ledger: Ledger, parser: StreamParser, data: bytes) -> tuple[Collector, int,
                                                                      RecordingReporter]:
    run = ledger.open_run(NODE, agent="x", max_cost=None, parent_run_id=None)
    step_id = ledger.open_step(node=NODE, run_id=run, iter_id=None, step=1, step_name="A",
                               agent="x", model=None, session=None)
    reporter = RecordingReporter()
    collector = Collector(ledger, reporter, step_id)
    pump = StreamPump(io.BytesIO(data), parser, collector)
    pump.run()
    assert pump.stream_error is None
    return collector, step_id, reporter


def test_claude_retries_are_counted_and_figures_flushed(ledger: Ledger) -> None:
    data = (STREAMS / "claude-retry-then-success.jsonl").read_bytes()
    collector, step_id, reporter = _pump(ledger, ClaudeParser(), data)
    assert collector.retries == 1
    assert any("API retry 1/10: server_error (HTTP 500)" in line for line in reporter.lines)
    row = ledger.step(step_id)
    assert row is not None
    assert (row.cost, row.model, row.input_tokens, row.cached_input_tokens,
            row.output_tokens) == (0.0075, "claude-opus-4-8", 1000, 0, 100)
    assert row.session == "8081a3cb-3242-42fe-a891-d1e688957041"
    assert collector.result is not None and collector.result.ok


def test_codex_usage_lands_on_the_row_and_cost_stays_unknown(ledger: Ledger) -> None:
    data = (STREAMS / "codex-resume.jsonl").read_bytes()
    collector, step_id, _ = _pump(ledger, CodexParser(prior=(2000, 0, 200)), data)
    row = ledger.step(step_id)
    assert row is not None
    assert (row.cost, row.input_tokens, row.output_tokens) == (None, 2000, 200)
    assert collector.usage == (2000, 0, 200)


def test_bad_bytes_and_an_over_long_line_do_not_stop_the_stream(ledger: Ledger) -> None:
    data = (b"\xff\xfe not utf-8\n" + b"z" * (MAX_LINE_BYTES + 10) + b"\n"
            + (STREAMS / "claude-text-only.jsonl").read_bytes())
    collector, _, reporter = _pump(ledger, ClaudeParser(), data)
    assert collector.result is not None and collector.result.ok
    assert collector.cost == 0.0075
    assert any("skipped an over-long output line" in line for line in reporter.lines)
    assert any("not utf-8" in line for line in reporter.lines)
