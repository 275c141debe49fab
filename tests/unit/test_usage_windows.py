"""Usage-limit windows: what the parsers make of the real CLIs' captured usage-limit
streams (tests/fixtures/streams: Claude Code's ``rate_limit_event``, Codex's session
rollout, the command protocol's JSON lines), and the pure window rules of
``fractal.domain.usage.windows`` (waits, backoff, the single probe, the release in batches)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fractal.agents.base import AgentEvent, ResultEvent, StreamParser, WindowEvent
from fractal.agents.claude_stream import ClaudeParser
from fractal.agents.codex_rollout import read_rollout, stated_reset, window_name
from fractal.agents.codex_stream import CodexParser
from fractal.agents.command import CommandParser
from fractal.domain.agent.errors import USAGE_LIMIT
from fractal.domain.usage.windows import (
    BACKOFF_FIRST,
    BACKOFF_MOST,
    CLOCK_PAST,
    PROBE_POLL,
    PROBE_STALE,
    RELEASE_GAP,
    RESUME_JITTER,
    Action,
    UsageLimit,
    UsageWarning,
    WindowRow,
    WindowState,
    backoff,
    clock_reset,
    credential_key,
    decide,
    limit_reason,
    next_wake,
    over_wait_reason,
    parse_pause_at,
    should_pause_early,
    until_label,
    utc_label,
    wait_refusal,
)

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams" / "usage-limit"


def replay(parser: StreamParser, name: str) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for line in (STREAMS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        events += parser.feed(line)
    return events + parser.finish()


def windows(events: list[AgentEvent]) -> list[WindowEvent]:
    return [e for e in events if isinstance(e, WindowEvent)]


def verdict(events: list[AgentEvent]) -> ResultEvent | None:
    results = [e for e in events if isinstance(e, ResultEvent)]
    return results[-1] if results else None


# ---- Claude Code -----------------------------------------------------------------------

CLAUDE_CASES = [
    # stream, rejected window (name, resets_at) or None, verdict kind, warning utilization
    ("claude-usage-limit", ("five_hour", 1796123340.0), USAGE_LIMIT, None),
    ("claude-usage-limit-weekly", ("seven_day", None), USAGE_LIMIT, None),
    ("claude-usage-limit-max-retries-5", ("five_hour", None), USAGE_LIMIT, None),
    ("claude-subscriber-http429", None, "rate_limit", None),
    ("claude-apikey-usage-limit", None, "rate_limit", None),
    ("claude-usage-warning", None, None, 0.96),
    ("claude-usage-reopened", None, None, None),
]


@pytest.mark.parametrize(("name", "closed", "kind", "warned"), CLAUDE_CASES)
def test_claude_usage_window_is_read_from_its_rate_limit_event(
        name: str, closed: tuple[str, float | None] | None, kind: str | None,
        warned: float | None) -> None:
    events = replay(ClaudeParser(), name)
    rejected = [w for w in windows(events) if w.rejected]
    warnings = [w for w in windows(events) if not w.rejected]
    result = verdict(events)
    assert result is not None
    if closed is None:
        assert rejected == []
    else:
        assert len(rejected) == 1
        assert rejected[0].window == closed[0]
        assert rejected[0].resets_at is not None
        if closed[1] is not None:
            assert rejected[0].resets_at == closed[1]
    if kind is None:
        assert result.ok
    else:
        assert not result.ok and result.error_kind == kind
    if warned is None:
        assert warnings == []
    else:
        assert [w.utilization for w in warnings] == [warned]
        assert warnings[0].window == "five_hour" and warnings[0].resets_at is not None


def test_a_rejected_event_without_reset_or_type_is_a_transient_429() -> None:
    parser = ClaudeParser()
    line = json.dumps({"type": "rate_limit_event",
                       "rate_limit_info": {"status": "rejected", "resetsAt": 1796123340}})
    assert parser.feed(line) == []
    assert parser.window_closed is None


# ---- Codex: the rollout under $CODEX_HOME/sessions ---------------------------------------


@pytest.fixture()
def sessions(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "codex-home" / "sessions"


def place_rollout(sessions: Path, name: str, thread: str) -> Path:
    """Put a capture's rollout events where Codex writes them for ``thread``."""
    day = sessions / "2026" / "12" / "01"
    day.mkdir(parents=True, exist_ok=True)
    target = day / f"rollout-2026-12-01T09-00-00-{thread}.jsonl"
    shutil.copyfile(STREAMS / f"{name}.rollout-events.jsonl", target)
    return target


def thread_of(name: str) -> str:
    for line in (STREAMS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        if data.get("type") == "thread.started":
            return str(data["thread_id"])
    raise AssertionError(f"{name} names no thread")


CODEX_CASES = [
    # stream, closed window?, final kind (None: ok), warning utilization
    ("codex-usage-limit", True, USAGE_LIMIT, None),
    ("codex-usage-limit-weekly", True, USAGE_LIMIT, None),
    ("codex-usage-limit-until", True, USAGE_LIMIT, None),
    ("codex-http429-default-retries", False, "rate_limit", None),
    ("codex-usage-warning", False, None, 0.96),
    ("codex-usage-reopened", False, None, None),
]


@pytest.mark.parametrize(("name", "closed", "kind", "warned"), CODEX_CASES)
def test_codex_usage_window_is_read_from_the_session_rollout(
        sessions: Path, name: str, closed: bool, kind: str | None,
        warned: float | None) -> None:
    place_rollout(sessions, name, thread_of(name))
    events = replay(CodexParser(sessions=sessions, since=0.0), name)
    rejected = [w for w in windows(events) if w.rejected]
    warnings = [w for w in windows(events) if not w.rejected]
    result = verdict(events)
    assert result is not None
    assert bool(rejected) is closed
    if kind is None:
        assert result.ok
    else:
        assert not result.ok and result.error_kind == kind
    if warned is None:
        assert all(w.utilization != warned for w in warnings)
    else:
        assert warnings and warnings[0].utilization == warned
        assert warnings[0].window == "five_hour" and warnings[0].resets_at == 1796119800


def test_without_a_rollout_codex_stays_an_ordinary_failure(sessions: Path) -> None:
    events = replay(CodexParser(sessions=sessions, since=0.0), "codex-usage-limit")
    result = verdict(events)
    assert result is not None and not result.ok and result.error_kind != USAGE_LIMIT
    assert windows(events) == []


def test_a_rollout_of_another_thread_is_not_read(sessions: Path) -> None:
    stale = place_rollout(sessions, "codex-usage-limit", "someone-else")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    events = replay(CodexParser(sessions=sessions, since=time.time() - 5), "codex-usage-limit")
    assert windows(events) == []


@pytest.mark.parametrize(("message", "failed_at", "expected"), [
    ("... or try again at 11:10 AM.", "2026-12-01T09:09:07", "2026-12-01T11:10:00"),
    # the stated minute is the current one: its end, never tomorrow (was 2026-12-02T09:09)
    ("... or try again at 9:09 AM.", "2026-12-01T09:09:15", "2026-12-01T09:10:00"),
    ("... or try again at 12:07 AM.", "2026-12-07T00:07:29", "2026-12-07T00:08:00"),
    ("... or try again at 9:08 AM.", "2026-12-01T09:40:00", "2026-12-02T09:08:00"),
    ("... or try again at 8:05 PM.", "2026-12-01T09:00:00", "2026-12-01T20:05:00"),
    ("... or try again at Dec 4th, 2026 8:30 PM.", "2026-12-01T09:00:00",
     "2026-12-04T20:30:00"),
    ("You've hit your usage limit.", "2026-12-01T09:00:00", None),
])
def test_codex_stated_reset_is_read_in_the_cli_local_time(
        monkeypatch: pytest.MonkeyPatch, message: str, failed_at: str,
        expected: str | None) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        base = datetime.fromisoformat(failed_at).replace(tzinfo=UTC).timestamp()
        got = stated_reset(message, base)
        want = None if expected is None else \
            datetime.fromisoformat(expected).replace(tzinfo=UTC).timestamp()
        assert got == want
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_full_window_in_the_rollout_gives_the_reset(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout.jsonl"
    events = [
        {"type": "event_msg", "payload": {"type": "token_count", "rate_limits": {
            "primary": {"used_percent": 100.0, "window_minutes": 300, "resets_at": 1796120000},
            "secondary": {"used_percent": 40.0, "window_minutes": 10080,
                          "resets_at": 1796461800}}}},
        {"type": "event_msg", "payload": {"type": "task_complete", "error": {
            "message": "limit", "codex_error_info": "usage_limit_exceeded"}}},
    ]
    rollout.write_text("\n".join(json.dumps(e) for e in events) + "\nnot json\n")
    facts = read_rollout(rollout)
    assert facts.limit == WindowEvent(rejected=True, window="five_hour", resets_at=1796120000)


@pytest.mark.parametrize(("minutes", "name"), [
    (300, "five_hour"), (10080, "seven_day"), (60, "60m"), (None, "unknown"), (True, "unknown")])
def test_window_names(minutes: object, name: str) -> None:
    assert window_name(minutes) == name


# ---- the command protocol -----------------------------------------------------------------

COMMAND_CASES = [
    ('{"type": "usage_limit", "resets_at": 1796123340, "window": "five_hour"}',
     WindowEvent(rejected=True, window="five_hour", resets_at=1796123340.0)),
    ('{"type": "usage_limit"}', WindowEvent(rejected=True)),
    ('{"type": "usage_limit", "resets_at": "soon", "window": 5}', WindowEvent(rejected=True)),
    ('{"type": "usage", "utilization": 0.96, "resets_at": 1796123340}',
     WindowEvent(rejected=False, resets_at=1796123340.0, utilization=0.96)),
    ('{"type": "usage", "utilization": 96, "window": "seven_day"}',
     WindowEvent(rejected=False, window="seven_day", utilization=0.96)),
    ('{"type": "usage", "utilization": -1}', None),
    ('{"type": "usage", "utilization": 250}', None),
    ('{"type": "usage"}', None),
]


@pytest.mark.parametrize(("line", "event"), COMMAND_CASES)
def test_command_protocol_usage_lines(line: str, event: WindowEvent | None) -> None:
    parser = CommandParser()
    got = parser.feed(line)
    if event is None:
        assert not any(isinstance(e, WindowEvent) for e in got)
    else:
        assert got == [event]


def test_a_command_usage_limit_line_makes_the_launch_a_usage_limit_stop() -> None:
    parser = CommandParser()
    parser.feed('{"type": "usage_limit", "resets_at": 1796123340, "window": "five_hour"}')
    result = verdict(parser.finish())
    assert result is not None and result.error_kind == USAGE_LIMIT
    assert CommandParser().finish() == []


# ---- the pure window rules ------------------------------------------------------------------

NOW = 1_800_000_000.0


def row(state: WindowState, *, wake: float = NOW, prober: str | None = None,
        probe_started: float | None = None, opened: float | None = None,
        misses: int = 0) -> WindowRow:
    return WindowRow(credential="c", window="five_hour", resets_at=wake - RESUME_JITTER,
                     state=state, wake_at=wake, prober=prober, probe_started=probe_started,
                     misses=misses, opened_at=opened)


DECIDE_CASES = [
    # row, node, now, rank -> action, until
    (None, "a", NOW, 0, Action.LAUNCH, None),
    (row(WindowState.CLOSED, wake=NOW + 60), "a", NOW, 0, Action.WAIT, NOW + 60),
    (row(WindowState.CLOSED, wake=NOW), "a", NOW, 0, Action.PROBE, None),
    (row(WindowState.CLOSED, wake=NOW - 1), "a", NOW, 0, Action.PROBE, None),
    (row(WindowState.PROBING, prober="a", probe_started=NOW), "a", NOW, 0, Action.PROBE, None),
    (row(WindowState.PROBING, prober="b", probe_started=NOW), "a", NOW, 0,
     Action.WAIT, NOW + PROBE_POLL),
    (row(WindowState.PROBING, prober="b", probe_started=NOW - PROBE_STALE), "a", NOW, 0,
     Action.PROBE, None),
    (row(WindowState.PROBING, prober="b", probe_started=NOW - PROBE_STALE + 3), "a", NOW, 0,
     Action.WAIT, NOW + 3),
    (row(WindowState.OPEN, opened=NOW), "a", NOW, 0, Action.LAUNCH, None),
    (row(WindowState.OPEN, opened=NOW), "a", NOW, 2, Action.LAUNCH, None),
    (row(WindowState.OPEN, opened=NOW), "a", NOW, 3, Action.WAIT, NOW + RELEASE_GAP),
    (row(WindowState.OPEN, opened=NOW), "a", NOW + RELEASE_GAP, 5, Action.LAUNCH, None),
    (row(WindowState.OPEN, opened=NOW), "a", NOW, 7, Action.WAIT, NOW + 2 * RELEASE_GAP),
    (row(WindowState.OPEN), "a", NOW, 9, Action.LAUNCH, None),
]


@pytest.mark.parametrize(("window", "node", "now", "rank", "action", "until"), DECIDE_CASES)
def test_decide(window: WindowRow | None, node: str, now: float, rank: int, action: Action,
                until: float | None) -> None:
    decision = decide(window, node, now, rank)
    assert decision.action is action
    assert decision.until == until


@pytest.mark.parametrize(("resets_at", "now", "misses", "wake"), [
    (NOW + 100, NOW, 0, NOW + 100 + RESUME_JITTER),
    (NOW + 100, NOW, 3, NOW + 100 + RESUME_JITTER),  # a new stated reset ahead: wait for it
    (NOW - 100, NOW, 0, NOW + BACKOFF_FIRST),  # the stated reset passed: back off
    (None, NOW, 0, NOW + BACKOFF_FIRST),
    (None, NOW, 2, NOW + 2 * BACKOFF_FIRST),
    (None, NOW, 40, NOW + BACKOFF_MOST),
])
def test_next_wake(resets_at: float | None, now: float, misses: int, wake: float) -> None:
    assert next_wake(resets_at, now, misses) == wake


def test_decide_waits_a_given_probe_poll_for_another_probe() -> None:
    probing = row(WindowState.PROBING, prober="b", probe_started=NOW - 1)
    waiting = decide(probing, "a", NOW, 0, 0.5)
    assert (waiting.action, waiting.until) == (Action.WAIT, NOW + 0.5)
    assert decide(probing, "b", NOW, 0, 0.5).action is Action.PROBE


@pytest.mark.parametrize(("resets_at", "now", "jitter", "wake"), [
    (NOW + 100, NOW, 0.5, NOW + 100.5),  # a shorter jitter past a stated reset
    (NOW + 100, NOW, 0.0, NOW + 100),
    (NOW - 0.2, NOW, 0.5, NOW + 0.3),  # the reset passed within the jitter: still its wake
    (NOW - 1, NOW, 0.5, NOW + BACKOFF_FIRST),  # past reset plus jitter: back off
])
def test_next_wake_with_a_jitter(resets_at: float, now: float, jitter: float,
                                 wake: float) -> None:
    assert next_wake(resets_at, now, 0, jitter) == pytest.approx(wake)


def test_backoff_doubles_and_is_bounded() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [60.0, 120.0, 240.0, 480.0]
    assert backoff(100) == BACKOFF_MOST


def test_credential_key_never_holds_the_key_and_separates_credentials() -> None:
    secret = "sk-ant-very-secret-key"
    key = credential_key("claude", "/home/u/.claude", secret, None)
    assert len(key) == 16 and secret not in key
    assert key == credential_key("claude", "/home/u/.claude", secret, None)
    others = {credential_key("codex", "/home/u/.claude", secret, None),
              credential_key("claude", "/home/v/.claude", secret, None),
              credential_key("claude", "/home/u/.claude", secret + "x", None),
              credential_key("claude", "/home/u/.claude", secret, "openrouter")}
    assert key not in others and len(others) == 4


@pytest.mark.parametrize(("value", "fraction"), [
    ("95%", 0.95), (" 80% ", 0.8), (0.9, 0.9), (1, 1.0), ("100%", 1.0), (None, None)])
def test_parse_pause_at(value: object, fraction: float | None) -> None:
    assert parse_pause_at(value) == fraction


@pytest.mark.parametrize("value", ["95", "0%", "101%", "x%", 0, 1.5, -0.1, True, [95]])
def test_parse_pause_at_refuses(value: object) -> None:
    with pytest.raises(ValueError):
        parse_pause_at(value)


@pytest.mark.parametrize(("utilization", "pause_at", "pause"), [
    (0.96, 0.95, True), (0.95, 0.95, True), (0.94, 0.95, False), (0.99, None, False)])
def test_should_pause_early(utilization: float, pause_at: float | None, pause: bool) -> None:
    assert should_pause_early(UsageWarning(utilization), pause_at) is pause
    assert should_pause_early(None, pause_at) is False


def test_reasons() -> None:
    assert utc_label(1796123340) == "2026-12-01T11:09:00Z"
    assert limit_reason(UsageLimit("five_hour", 1796123340)) == \
        "usage limit (five_hour) until 2026-12-01T11:09:00Z"
    assert limit_reason(UsageLimit()) == "usage limit (unknown) until an unstated time"
    assert over_wait_reason(12 * 3600) == "usage window did not reopen within 12h"



def _local(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(("hour", "minute", "now", "expected"), [
    (11, 10, "2026-12-01T09:09:07", "2026-12-01T11:10:00"),  # ahead today: as stated
    (0, 7, "2026-12-07T00:06:59", "2026-12-07T00:07:00"),    # a second ahead: as stated
    (0, 7, "2026-12-07T00:07:00", "2026-12-07T00:08:00"),    # the minute now: its end
    (0, 7, "2026-12-07T00:07:29", "2026-12-07T00:08:00"),
    (0, 7, "2026-12-07T00:07:59.9", "2026-12-07T00:08:00"),
    (0, 7, "2026-12-07T00:08:05", "2026-12-07T00:08:00"),    # just past: its end (past)
    (0, 7, f"2026-12-07T00:{8 + int(CLOCK_PAST) // 60:02d}:00", "2026-12-07T00:08:00"),
    (0, 7, f"2026-12-07T00:{8 + int(CLOCK_PAST) // 60:02d}:01", "2026-12-08T00:07:00"),
    (23, 59, "2026-12-07T23:59:30", "2026-12-08T00:00:00"),  # its end is tomorrow's 00:00
    (9, 8, "2026-12-01T09:40:00", "2026-12-02T09:08:00"),    # long past: tomorrow
])
def test_a_clock_time_stated_to_the_minute(hour: int, minute: int, now: str,
                                           expected: str) -> None:
    assert clock_reset(hour, minute, _local(now)) == _local(expected)


DAY_START = 1796083200.0  # 2026-12-01T00:00:00Z


@pytest.mark.parametrize(("instant", "now", "label"), [
    (DAY_START + 14 * 3600 + 305, DAY_START + 3600, "14:05:05Z"),          # today
    (DAY_START + 86399, DAY_START, "23:59:59Z"),
    (DAY_START + 86400 + 425, DAY_START + 449, "2026-12-02 00:07:05Z"),   # tomorrow
    (DAY_START - 1, DAY_START + 10, "2026-11-30 23:59:59Z"),              # yesterday
])
def test_a_wait_end_is_dated_unless_today(instant: float, now: float, label: str) -> None:
    assert until_label(instant, now) == label


@pytest.mark.parametrize(("wake_in", "stated", "max_wait", "refused"), [
    (60.0, True, 3600, False), (3600.0, True, 3600, False), (3601.0, True, 3600, True),
    (86376.0, True, 43200, True),  # the day-long wait of a misread clock time
    (-30.0, True, 60, False),      # a wake already past waits for nothing
    (1800.0, False, 60, False),    # a backoff is a guess: the wait gives up after 60 s
])
def test_a_wait_longer_than_max_usage_wait_is_refused(wake_in: float, stated: bool,
                                                      max_wait: int, refused: bool) -> None:
    now = DAY_START + 449
    why = wait_refusal(now + wake_in - 5 if stated else None, now + wake_in, now, max_wait,
                       "0123456789abcdef")
    assert (why is not None) is refused
    if why is not None:
        assert why.startswith(f"usage window reopens at {utc_label(now + wake_in)}, beyond "
                              "max_usage_wait (")
        assert why.endswith("or `fractal usage reopen 0123456789abcdef` if it reopened sooner")
        assert len(why) <= 250
