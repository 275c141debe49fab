"""The notify command's contract (fractal/domain/notify.py)."""

from __future__ import annotations

import json

import pytest

from fractal.domain.notify import (
    batch_env,
    batch_payload,
    is_secret,
    notify_env,
    wanted_kinds,
)

KINDS = ("gate", "exited", "budget", "stall")


@pytest.mark.parametrize(("name", "secret"), [
    ("ANTHROPIC_API_KEY", True), ("OPENAI_API_KEY", True), ("GITHUB_TOKEN", True),
    ("gh_token", True), ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True),
    ("NTFY_AUTH", True), ("TOKEN", True), ("MY_SECRET_THING", True),
    ("PATH", False), ("HOME", False), ("TMUX", False), ("SSH_AUTH_SOCK", False),
    ("DISPLAY", False), ("DBUS_SESSION_BUS_ADDRESS", False),
])
def test_is_secret(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_notify_env_strips_credentials_and_loop_variables() -> None:
    env = notify_env({"PATH": "/bin", "X_API_KEY": "k", "GH_TOKEN": "t", "_NODE": "/n",
                      "FRACTAL_LAUNCH_ID": "m", "DISPLAY": ":0"})
    assert env == {"PATH": "/bin", "DISPLAY": ":0"}


def test_notify_env_is_an_allow_list() -> None:
    """Credentials that do not look like one (a PAT, a URL with a password) never pass
    either; only the named variables, LC_* and FRACTAL_NOTIFY_* do."""
    env = notify_env({"PATH": "/bin", "LC_ALL": "C", "GITHUB_PAT": "ghp_abc",
                      "NPM_AUTHTOKEN": "n", "DATABASE_URL": "postgres://u:hunter2@db",
                      "FRACTAL_NOTIFY_URL": "https://example.invalid/hook",
                      "FRACTAL_NOTIFY_TOKEN": "t", "HOME": "/root"})
    assert env == {"PATH": "/bin", "LC_ALL": "C", "HOME": "/root",
                   "FRACTAL_NOTIFY_URL": "https://example.invalid/hook"}


@pytest.mark.parametrize(("setting", "kinds", "problems"), [
    (None, set(KINDS), 0),
    (["gate", "budget"], {"gate", "budget"}, 0),
    ("gate, stall", {"gate", "stall"}, 0),
    (["gate", "nope"], {"gate"}, 1),
    (42, set(KINDS), 1),
])
def test_wanted_kinds(setting: object, kinds: set[str], problems: int) -> None:
    got, found = wanted_kinds(setting, KINDS)
    assert got == kinds
    assert len(found) == problems


EVENT = {"id": "ab12cd34", "kind": "gate", "node": "main.a",
         "summary": "step 7 (REVIEW) awaits approval", "command": "fractal node approve main.a 7"}


def test_one_event_batch() -> None:
    env = batch_env("b1", "main", [EVENT])
    assert env["FRACTAL_EVENT_KIND"] == "gate"
    assert env["FRACTAL_EVENT_COMMAND"] == "fractal node approve main.a 7"
    assert env["FRACTAL_EVENT_COUNT"] == "1"
    assert env["FRACTAL_EVENT_TITLE"] == "fractal: main.a gate: step 7 (REVIEW) awaits approval"
    assert json.loads(batch_payload("b1", "main", [EVENT]))["events"] == [EVENT]


def test_a_burst_is_one_headline() -> None:
    events = [EVENT, {**EVENT, "kind": "exited", "node": "main.b"},
              {**EVENT, "kind": "exited", "node": "main.c"}]
    env = batch_env("b2", "main", events)
    assert env["FRACTAL_EVENT_COUNT"] == "3"
    assert env["FRACTAL_EVENT_KINDS"] == "gate,exited"
    assert env["FRACTAL_EVENT_NODES"] == "main.a,main.b,main.c"
    assert env["FRACTAL_EVENT_TITLE"] == "fractal: 3 events in main (gate, exited)"
