"""The engine of the fake agent CLIs (fake_claude.py, fake_codex.py): replay a stream the
real CLI printed (tests/fixtures/streams) with its exit code, timing and signal behaviour.

The brain is fake, the process is real. Markers in the prompt choose what happens:

  [fake:NAME]              replay fixture NAME (e.g. claude-http429); several markers are
                           used in turn by the attempts of the same prompt (retries)
  [fake:stall]             print the lines before the fixture's signal point (or the first
                           line), then wait for a signal
  [fake:hang-after]        print everything, then never exit
  [fake:ignore-term]       ignore SIGTERM
  [fake:truncate=N]        print only the first N lines
  [fake:exit=N]            exit N instead of the fixture's code
  [fake:grandchild=PATH]   start `setsid sleep 600` (its own session, like Claude's Bash
                           tool) and write its pid to PATH
  [fake:noise]             stderr noise, including a JSON line that looks like a result
  [fake:badutf8]           a stdout line of invalid UTF-8
  [fake:longline=MB]       a stdout line of MB megabytes
  [fake:write=PATH:TEXT]   write TEXT to PATH (relative to the working directory)

``FAKE_CLI_DIR`` (a directory) records each call as ``<cli>-call-<n>.json`` (argv, env,
prompt, cwd, whether stdin was /dev/null) and the sessions the fake knows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
MARKER = re.compile(r"\[fake:([a-z0-9-]+)(?:=([^\]]*))?\]")


def fail(message: str, code: int = 1) -> None:
    """What a CLI does with bad usage: a message on stderr, nothing on stdout."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)


@dataclass
class Call:
    """One invocation: which CLI, its prompt and the session it was asked to use."""

    cli: str
    prompt: str
    markers: list[tuple[str, str]] = field(default_factory=list)
    state: Path | None = None
    recorded: bool = False

    def __post_init__(self) -> None:
        self.markers = [(m.group(1), m.group(2) or "") for m in MARKER.finditer(self.prompt)]
        state = os.environ.get("FAKE_CLI_DIR")
        self.state = Path(state) if state else None

    def flag(self, name: str) -> str | None:
        return next((v for k, v in self.markers if k == name), None)

    def attempt(self) -> int:
        """How many earlier calls of this CLI carried the same prompt (this one excluded,
        once recorded)."""
        if self.state is None:
            return 0
        calls = sorted(self.state.glob(f"{self.cli}-call-*.json"))
        same = sum(1 for c in calls if json.loads(c.read_text())["prompt"] == self.prompt)
        return same - 1 if self.recorded else same

    def fixture(self, default: str) -> str:
        names = [k for k, _ in self.markers if k.startswith(f"{self.cli}-")]
        if not names:
            return default
        return names[min(self.attempt(), len(names) - 1)]

    def record(self, argv: list[str]) -> None:
        if self.state is None:
            return
        self.state.mkdir(parents=True, exist_ok=True)
        number = len(list(self.state.glob(f"{self.cli}-call-*.json"))) + 1
        mode = os.fstat(0).st_mode
        devnull = stat.S_ISCHR(mode) and os.fstat(0).st_rdev == os.stat(os.devnull).st_rdev
        (self.state / f"{self.cli}-call-{number:03d}.json").write_text(json.dumps({
            "argv": argv, "env": dict(os.environ), "prompt": self.prompt, "cwd": os.getcwd(),
            "stdin_devnull": devnull}))
        self.recorded = True

    def knows(self, session: str) -> bool:
        return self.state is None or (self.state / f"{self.cli}-session-{session}").exists()

    def remember(self, session: str) -> None:
        if self.state is not None:
            (self.state / f"{self.cli}-session-{session}").touch()


def fixture_facts(name: str) -> dict[str, object]:
    """The fixture's entry in index.json (exit code, signal point...)."""
    index = json.loads((STREAMS / "index.json").read_text())
    return next(e for e in index if e.get("name") == name)


def side_effects(call: Call) -> None:
    """The markers that act before the stream: files, a grandchild, odd output."""
    for key, value in call.markers:
        if key == "write":
            path, _, text = value.partition(":")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text + "\n")
        elif key == "grandchild":
            child = subprocess.Popen(["setsid", "sleep", "600"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            Path(value).write_text(str(child.pid))
        elif key == "noise":
            sys.stderr.flush()
            sys.stderr.buffer.write(b'WARNING: something harmless\n{"type":"result",'
                                    b'"is_error":false,"total_cost_usd":99.0,'
                                    b'"session_id":"from-stderr"}\n\xff\xfe not utf-8\n')
            sys.stderr.buffer.flush()
        elif key == "badutf8":
            sys.stdout.buffer.write(b"bad bytes: \xff\xfe\xc3\x28 end\n")
            sys.stdout.buffer.flush()
        elif key == "longline":
            sys.stdout.write("y" * int(float(value) * 1024 * 1024) + "\n")
            sys.stdout.flush()


def replay(call: Call, name: str, rewrite: Callable[[str], str],
           on_sigint: Callable[[list[str], int], None] | None) -> None:
    """Print fixture ``name`` (through ``rewrite``) as the markers say, then exit."""
    facts = fixture_facts(name)
    lines = [rewrite(ln) for ln in (STREAMS / f"{name}.jsonl").read_text().splitlines()]
    stderr = (STREAMS / f"{name}.stderr.txt").read_text()
    code = int(str(facts.get("exit_code", 0)))
    code = 128 - code if code < 0 else code  # Popen's -15 is a shell's 143
    if call.flag("exit") is not None:
        code = int(call.flag("exit") or 0)
    if call.flag("ignore-term") is not None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stderr.write(stderr)
    sys.stderr.flush()
    side_effects(call)
    stall = call.flag("stall") is not None
    cut = int(str(facts.get("lines_before_signal", 1))) if stall else len(lines)
    if call.flag("truncate") is not None:
        cut = min(cut, int(call.flag("truncate") or 0))
    if stall and on_sigint is not None:
        # What a SIGINT fixture printed after its signal; other fixtures have no such tail.
        after = lines[cut:] if facts.get("signal") == "SIGINT" else []
        signal.signal(signal.SIGINT, lambda *_: on_sigint(after, code))
    elif stall:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    for line in lines[:cut]:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    if stall or call.flag("hang-after") is not None:
        while True:
            time.sleep(3600)
    sys.exit(code)


def emit_and_exit(lines: list[str], code: int) -> None:
    """Print ``lines`` and exit ``code`` at once (from a signal handler)."""
    for line in lines:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    os._exit(code)
