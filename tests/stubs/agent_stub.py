#!/usr/bin/env python3
"""A stub agent for the ``command`` backend: the brain is fake, the process is real.

It reads the prompt on stdin and obeys markers written in it (so a step file decides
what its agent does):

  [stub:write=PATH:TEXT]   write TEXT to PATH (relative to the worktree)
  [stub:append=PATH:TEXT]  append a line
  [stub:fail=N]            print to stderr and exit N
  [stub:sleep=S]           sleep S seconds, then go on
  [stub:hang]              sleep forever
  [stub:ignore-term]       ignore SIGTERM (with hang: only SIGKILL ends it)
  [stub:setsid-child=PATH] start `setsid sleep 600` and write its pid to PATH
  [stub:flood=MB]          print MB megabytes of text lines
  [stub:longline=MB]       print one line of MB megabytes
  [stub:badutf8]           print invalid UTF-8 bytes
  [stub:cost=USD]          report a cost
  [stub:no-session]        report no session
  [stub:capture=DIR]       save argv, env and prompt to DIR/call-<n>.json
  [stub:result-then-hang]  report a final cost, then hang
  [stub:wait-file=PATH]    wait until PATH exists (a test's release handle)
  [stub:hang-unless=PATH]  hang unless PATH exists
  [stub:sync-fail=N]       when the step is a SYNC: exit N
  [stub:sync-sleep=S]      when the step is a SYNC: sleep S seconds
  [stub:commit=MESSAGE]    run `python -m fractal commit MESSAGE` in the worktree, print its
                           output, and exit with its code when it fails

It reports its session (FRACTAL_SESSION_ID when continuing) like the command protocol.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path


def markers(prompt: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2) or "") for m in
            re.finditer(r"\[stub:([a-z0-9-]+)(?:=([^\]]*))?\]", prompt)]


def emit(kind: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"type": kind, **fields}) + "\n")
    sys.stdout.flush()


def main() -> int:
    prompt = sys.stdin.read()
    todo = markers(prompt)
    is_sync = os.environ.get("STEP_LABEL", "").startswith("SYNC")
    names = {k for k, _ in todo}
    if "ignore-term" in names:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "no-session" not in names:
        emit("session", id=os.environ.get("FRACTAL_SESSION_ID") or f"stub-{uuid.uuid4().hex[:8]}")
    print(f"stub agent: {os.environ.get('STEP_LABEL', '?')}", flush=True)
    for key, value in todo:
        if key == "capture":
            out = Path(value)
            out.mkdir(parents=True, exist_ok=True)
            n = len(list(out.glob("call-*.json"))) + 1
            (out / f"call-{n}.json").write_text(json.dumps(
                {"argv": sys.argv, "env": dict(os.environ), "prompt": prompt, "cwd": os.getcwd()}))
        elif key in ("write", "append"):
            path, _, text = value.partition(":")
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a" if key == "append" else "w") as fh:
                fh.write(text + "\n")
        elif key == "cost":
            emit("cost", usd=float(value))
        elif key == "sleep":
            time.sleep(float(value))
        elif key == "setsid-child":
            child = subprocess.Popen(["setsid", "sleep", "600"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            Path(value).write_text(str(child.pid))
        elif key == "flood":
            line = ("x" * 99 + "\n") * 1000
            for _ in range(int(float(value) * 1024 * 1024 / len(line))):
                sys.stdout.write(line)
            sys.stdout.flush()
        elif key == "longline":
            sys.stdout.write("y" * int(float(value) * 1024 * 1024) + "\n")
            sys.stdout.flush()
        elif key == "badutf8":
            sys.stdout.flush()
            sys.stdout.buffer.write(b"bad bytes: \xff\xfe\xc3\x28 end\n")
            sys.stdout.buffer.flush()
        elif key == "commit":
            proc = subprocess.run([sys.executable, "-m", "fractal", "commit", value],
                                  capture_output=True, text=True, check=False)
            print(f"fractal commit {value!r} -> exit {proc.returncode}", flush=True)
            print((proc.stdout + proc.stderr).strip(), flush=True)
            if proc.returncode != 0:
                return proc.returncode
        elif key == "result-then-hang":
            emit("cost", usd=0.25)
            time.sleep(3600)
        elif key == "hang":
            while True:
                time.sleep(3600)
        elif key == "wait-file":
            while not Path(value).exists():
                time.sleep(0.02)
        elif key == "hang-unless":
            while not Path(value).exists():
                time.sleep(0.05)
        elif key == "sync-fail" and is_sync:
            print("stub SYNC failing", file=sys.stderr, flush=True)
            return int(value)
        elif key == "sync-sleep" and is_sync:
            time.sleep(float(value))
        elif key == "fail":
            print(f"stub agent failing with exit {value}", file=sys.stderr, flush=True)
            return int(value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
