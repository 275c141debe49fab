"""The price-table cache and pricing at launch, from a fixture served as a file (seed:
"Pricing and untracked spend"; ref §5.4). No test here touches the network."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fractal.agents.base import CostEvent, UsageEvent
from fractal.agents.codex import CodexBackend
from fractal.pricing import (
    DEFAULT_URL,
    Freshness,
    PricingError,
    fetch,
    load_table,
    pricing_path,
    pricing_url,
    refresh,
    token_priced,
)
from fractal.runtime.costing import PricedBackend, rates_for, unpriceable
from tests.conftest import PRICES_FIXTURE

STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "streams"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"FRACTAL_PRICING_FILE": str(tmp_path / "cache" / "pricing.json"),
            "FRACTAL_PRICING_URL": PRICES_FIXTURE.as_uri(), "HOME": str(tmp_path)}


def test_locations_and_their_overrides(tmp_path: Path) -> None:
    assert pricing_path({"HOME": str(tmp_path)}) == tmp_path / ".fractal" / "pricing.json"
    assert pricing_path({"FRACTAL_PRICING_FILE": "/x/p.json"}) == Path("/x/p.json")
    assert pricing_url({}) == DEFAULT_URL and DEFAULT_URL.startswith("https://")
    assert pricing_url({"FRACTAL_PRICING_URL": "file:///p.json"}) == "file:///p.json"


def test_refresh_fetches_then_keeps_a_fresh_copy(env: dict[str, str]) -> None:
    path = Path(env["FRACTAL_PRICING_FILE"])
    first = refresh(env)
    assert (first.state, first.path) == (Freshness.FETCHED, path)
    assert path.read_bytes() == PRICES_FIXTURE.read_bytes()
    assert refresh(env).state is Freshness.FRESH
    assert not list(path.parent.glob(".*tmp"))  # replaced atomically, no temp left


def test_a_day_old_copy_is_refetched_and_a_failed_fetch_keeps_it(env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    path = Path(env["FRACTAL_PRICING_FILE"])
    refresh(env)
    old = time.time() - 2 * 24 * 3600
    os.utime(path, (old, old))
    assert refresh(env).state is Freshness.FETCHED
    os.utime(path, (old, old))
    broken = {**env, "FRACTAL_PRICING_URL": (tmp_path / "gone.json").as_uri()}
    result = refresh(broken)
    assert result.state is Freshness.STALE and result.error and "gone.json" in result.error
    assert result.age is not None and result.age > 24 * 3600
    assert "gpt-fixture" in load_table(path)  # the stale copy still prices


def test_no_copy_and_a_failed_fetch_is_missing(env: dict[str, str], tmp_path: Path) -> None:
    result = refresh({**env, "FRACTAL_PRICING_URL": (tmp_path / "gone.json").as_uri()})
    assert result.state is Freshness.MISSING and not Path(env["FRACTAL_PRICING_FILE"]).exists()


@pytest.mark.parametrize(("body", "problem"), [
    (b"not json", "is not JSON"),
    (b"[1, 2]", "lists no priced model"),
    (b'{"m": {"max_tokens": 3}}', "lists no priced model"),
])
def test_a_bad_table_is_refused_and_the_copy_untouched(tmp_path: Path, body: bytes,
                                                       problem: str) -> None:
    source, dest = tmp_path / "src.json", tmp_path / "dest.json"
    source.write_bytes(body)
    dest.write_text("{}")
    with pytest.raises(PricingError, match=problem):
        fetch(source.as_uri(), dest)
    assert dest.read_text() == "{}"


def test_load_table_rereads_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"a": {"input_cost_per_token": 1, "output_cost_per_token": 2}}')
    assert set(load_table(path)) == {"a"}
    path.write_text('{"bb": {"input_cost_per_token": 1, "output_cost_per_token": 2}}')
    assert set(load_table(path)) == {"bb"}
    with pytest.raises(PricingError, match="cannot read the price table"):
        load_table(tmp_path / "missing.json")


@pytest.mark.parametrize(("backend", "provider", "priced"), [
    ("codex", None, True), ("codex", "openrouter", True), ("claude", None, False),
    ("claude", "openrouter", True), ("command", None, False),
])
def test_which_backends_are_token_priced(backend: str, provider: str | None,
                                         priced: bool) -> None:
    assert token_priced(backend, provider) is priced


def test_a_priced_backend_turns_codex_usage_into_cost(tmp_path: Path) -> None:
    from fractal.agents.base import LaunchRequest

    table = tmp_path / "p.json"
    table.write_bytes(PRICES_FIXTURE.read_bytes())
    backend = PricedBackend(CodexBackend(), rates_for(None, table))
    assert (backend.name, backend.enforces_budget) == ("codex", False)
    request = LaunchRequest(prompt="p", worktree=tmp_path, node_dir=tmp_path,
                            model="gpt-fixture")
    parser = backend.parser(request)
    events = [e for line in (STREAMS / "codex-text-only.jsonl").read_text().splitlines()
              for e in parser.feed(line)] + parser.finish()
    usage = [i for i, e in enumerate(events) if isinstance(e, UsageEvent)]
    costs = [e for e in events if isinstance(e, CostEvent)]
    assert len(usage) == 1 and isinstance(events[usage[0] + 1], CostEvent)
    assert [c.usd for c in costs] == [pytest.approx(0.002)]
    unknown = backend.parser(LaunchRequest(prompt="p", worktree=tmp_path, node_dir=tmp_path,
                                           model="gpt-5.5"))
    assert not [e for line in (STREAMS / "codex-text-only.jsonl").read_text().splitlines()
                for e in unknown.feed(line) if isinstance(e, CostEvent)]


def test_unpriceable_names_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "p.json"
    table.write_bytes(PRICES_FIXTURE.read_bytes())
    monkeypatch.setenv("FRACTAL_PRICING_FILE", str(table))
    assert unpriceable("codex", "gpt-fixture", None) is None
    assert unpriceable("claude", "anthropic/claude-fixture", "openrouter") is None
    assert str(unpriceable("codex", None, None)).startswith("a cost cap requires a model")
    assert str(unpriceable("codex", "gpt-9", None)).startswith("model 'gpt-9' has no price")
    monkeypatch.setenv("FRACTAL_PRICING_FILE", str(tmp_path / "none.json"))
    assert "cannot read the price table" in str(unpriceable("codex", "gpt-fixture", None))
