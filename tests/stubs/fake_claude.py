#!/usr/bin/env python3
"""A fake ``claude`` (Claude Code 2.1.197 in ``-p`` stream-json mode) for the e2e tests.

Accepts the flags fractal passes, refuses what the real CLI refuses (stream-json without
``--verbose``, ``--resume`` of an unknown session, a reused ``--session-id``, a missing
``--settings`` file), then replays a captured stream with the session id it was given;
markers in the prompt steer it (see fake_cli.py). SIGINT while stalled prints a final
``result`` with the cost so far, as the real CLI does; SIGTERM kills it silently.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_cli import Call, emit_and_exit, fail, replay

VALUED = {"--model", "--effort", "--max-budget-usd", "--settings", "--session-id", "--resume",
          "--output-format", "--permission-mode", "--allowedTools"}
FLAGS = {"-p", "--print", "--verbose", "--include-partial-messages", "--fork-session"}


def parse(argv: list[str]) -> tuple[dict[str, str], set[str], str]:
    options: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return options, flags, " ".join(argv[i + 1:])
        if word in VALUED and i + 1 < len(argv):
            options[word] = argv[i + 1]
            i += 2
            continue
        if word in FLAGS:
            flags.add(word)
            i += 1
            continue
        fail(f"error: unknown option '{word}'")
    fail("Error: Input must be provided either through stdin or as a prompt argument "
         "when using --print")
    raise AssertionError


def main() -> None:
    options, flags, prompt = parse(sys.argv[1:])
    if not flags & {"-p", "--print"}:
        fail("fake claude only knows --print mode")
    if options.get("--output-format") != "stream-json":
        fail("fake claude only knows --output-format stream-json")
    if "--verbose" not in flags:
        fail("Error: When using --print, --output-format=stream-json requires --verbose")
    if "--settings" in options and not Path(options["--settings"]).is_file():
        fail(f"Error: Settings file not found: {options['--settings']}")
    call = Call("claude", prompt)
    call.record(sys.argv)
    resume, minted = options.get("--resume"), options.get("--session-id")
    if resume and minted:
        fail("Error: --session-id cannot be used with --resume")
    if resume and not call.knows(resume):
        fail(f"No conversation found with session ID: {resume}")
    if minted and call.state is not None and call.knows(minted):
        fail(f"Error: Session ID {minted} is already in use.")
    name = call.fixture("claude-resume" if resume else "claude-text-only")
    lines = (Path(__file__).resolve().parent.parent / "fixtures" / "streams"
             / f"{name}.jsonl").read_text().splitlines()
    original = next((json.loads(ln).get("session_id") for ln in lines), None)
    session = resume or minted
    if session and lines:
        call.remember(session)

    def rewrite(line: str) -> str:
        return line.replace(original, session) if original and session else line

    def on_sigint(rest: list[str], code: int) -> None:
        if rest:
            emit_and_exit(rest, code)
        emit_and_exit([json.dumps({
            "type": "result", "subtype": "error_during_execution", "is_error": True,
            "session_id": session or original, "total_cost_usd": 0,
            "terminal_reason": "aborted_streaming", "usage": {}})], 1)

    replay(call, name, rewrite, on_sigint)


if __name__ == "__main__":
    main()
