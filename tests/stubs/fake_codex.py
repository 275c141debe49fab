#!/usr/bin/env python3
"""A fake ``codex`` (Codex CLI 0.171.0, ``exec --json``) for the e2e tests.

Accepts ``codex exec [flags] [resume <thread>] [flags] -- <prompt>``, refuses what the real
CLI would (no ``--json``, an unknown thread, a missing ``CODEX_HOME`` directory), prints its
stderr warnings, then replays a captured stream with a thread id of its own (fresh) or the
resumed one; markers in the prompt steer it (see fake_cli.py). SIGINT ends it with exit 1
and no final event, as the real CLI does.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_cli import Call, emit_and_exit, fail, replay

VALUED = {"-C", "--cd", "-m", "--model", "-c", "--config", "--disable", "--enable",
          "-s", "--sandbox"}
FLAGS = {"--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
         "--full-auto", "--ephemeral"}


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] != "exec":
        fail("fake codex only knows `codex exec`")
    options: dict[str, list[str]] = {}
    flags: set[str] = set()
    resume: str | None = None
    prompt: str | None = None
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            prompt = " ".join(argv[i + 1:])
            break
        if word == "resume" and resume is None and i + 1 < len(argv):
            resume = argv[i + 1]
            i += 2
        elif word in VALUED and i + 1 < len(argv):
            options.setdefault(word, []).append(argv[i + 1])
            i += 2
        elif word in FLAGS:
            flags.add(word)
            i += 1
        else:
            fail(f"error: unexpected argument '{word}' found")
    if prompt is None:
        fail("Reading prompt from stdin...\nNo prompt provided.")
        return
    if "--json" not in flags:
        fail("fake codex only knows --json output")
    home = os.environ.get("CODEX_HOME")
    if home and not Path(home).is_dir():
        fail(f"Error: CODEX_HOME points to {home!r}, but that path does not exist")
    if "-C" in options:
        os.chdir(options["-C"][-1])
    call = Call("codex", prompt)
    call.record(sys.argv)
    if resume and not call.knows(resume):
        fail(f"Error: thread {resume} not found")
    name = call.fixture("codex-resume" if resume else "codex-text-only")
    lines = (Path(__file__).resolve().parent.parent / "fixtures" / "streams"
             / f"{name}.jsonl").read_text().splitlines()
    original = next((json.loads(ln).get("thread_id") for ln in lines[:1]), None)
    thread = resume or str(uuid.uuid4())
    if original:
        call.remember(thread)

    def rewrite(line: str) -> str:
        return line.replace(original, thread) if original else line

    def on_sigint(rest: list[str], code: int) -> None:
        sys.stderr.write(f"ERROR codex_core::session: failed to record rollout items: "
                         f"thread {thread} not found\n")
        sys.stderr.flush()
        emit_and_exit([], 1)

    replay(call, name, rewrite, on_sigint)


if __name__ == "__main__":
    main()
