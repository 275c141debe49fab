"""The stub agent's marker parser (``tests/stubs/agent_stub.py``) finds what the pattern
``\\[stub:([a-z0-9-]+)(?:=([^\\]]*))?\\]`` finds, without importing ``re`` at start, and
its protocol lines are what ``json.dumps`` writes."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re

import pytest

from tests.stubs import agent_stub

PATTERN = re.compile(r"\[stub:([a-z0-9-]+)(?:=([^\]]*))?\]")


def reference(prompt: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2) or "") for m in PATTERN.finditer(prompt)]


@pytest.mark.parametrize("prompt", [
    "", "[stub:hang]", "a [stub:fail=3] b", "[stub:write=x/y.txt:hello world]",
    "[stub:x=]", "[stub:]", "[stub:Hang]", "[stub:ab cd]", "[stub:cost=1", "[stub:a=[stub:b]",
    "[stub:[stub:hang]", "[stub:wait-file=/tmp/a]\n[stub:sync-fail=2][stub:no-session]",
    "[stub:write=a:multi\nline]",
])
def test_markers_match_the_pattern(prompt: str) -> None:
    assert agent_stub.markers(prompt) == reference(prompt)


def test_markers_match_the_pattern_on_random_prompts() -> None:
    pieces = ["[stub:", "]", "=", "a", "-", "1", "X", " ", "\n", ":", "["]
    rnd = random.Random(12)
    for _ in range(3000):
        prompt = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 14)))
        assert agent_stub.markers(prompt) == reference(prompt), prompt


@pytest.mark.parametrize("fields", [
    {"id": "stub-1234abcd"}, {"usd": 0.25}, {"usd": 1e-7}, {"usd": float("inf")},
    {"id": 'quote " and é'}, {"id": "back\\slash"},
])
def test_emit_writes_what_json_dumps_writes(fields: dict[str, object]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        agent_stub.emit("kind", **fields)
    assert out.getvalue() == json.dumps({"type": "kind", **fields}) + "\n"
