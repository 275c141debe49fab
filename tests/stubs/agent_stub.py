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
  [stub:done=REASON]       run `python -m fractal node done --reason REASON` (the node
                           ends its own run), print its output, exit with its failing code
  [stub:resolve]           when the prompt is in the resolve mode (a hand-back): keep both
                           sides of every file it lists (the marker lines dropped), `git add`
                           them, conclude the merge with `git commit --no-edit` (nothing
                           when no merge is in progress any more), and do nothing else in
                           this launch

It reports its session (FRACTAL_SESSION_ID when continuing) like the command protocol.
"""

from __future__ import annotations

import os
import sys
import time

# Only os, sys and time at start: every e2e step launches this script in a fresh
# interpreter, and json, re, subprocess, uuid, signal and pathlib (with enum, selectors,
# urllib and ipaddress behind them) cost several times the work of a plain step. Each
# marker that needs one imports it.

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/ ")


def markers(prompt: str) -> list[tuple[str, str]]:
    """Each ``[stub:NAME]`` or ``[stub:NAME=VALUE]`` in ``prompt``, in order: NAME is
    ``[a-z0-9-]+``, VALUE runs to the next ``]``; a malformed one is skipped and the
    search goes on from the character after its ``[``."""
    found: list[tuple[str, str]] = []
    at = prompt.find("[stub:")
    while at >= 0:
        start = at + len("[stub:")
        end = start
        while end < len(prompt) and prompt[end] in _NAME_CHARS:
            end += 1
        name, after = prompt[start:end], prompt[end:end + 1]
        close = prompt.find("]", end + 1) if after == "=" else end
        if name and ((after == "]") or (after == "=" and close >= 0)):
            found.append((name, prompt[end + 1:close] if after == "=" else ""))
            at = prompt.find("[stub:", close + 1)
        else:
            at = prompt.find("[stub:", at + 1)
    return found


def _json(value: object) -> str:
    if isinstance(value, str) and _PLAIN.issuperset(value):
        return f'"{value}"'
    if isinstance(value, float) and value - value == 0.0:  # finite: json writes its repr
        return repr(value)
    import json

    return json.dumps(value)


def emit(kind: str, **fields: object) -> None:
    """One protocol line: ``{"type": KIND, FIELD: VALUE, ...}`` as ``json.dumps`` writes it."""
    body = ", ".join(f"{_json(k)}: {_json(v)}" for k, v in {"type": kind, **fields}.items())
    sys.stdout.write("{" + body + "}\n")
    sys.stdout.flush()


def main() -> int:
    prompt = sys.stdin.read()
    todo = markers(prompt)
    is_sync = os.environ.get("STEP_LABEL", "").startswith("SYNC")
    names = {k for k, _ in todo}
    if "ignore-term" in names:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "no-session" not in names:
        emit("session", id=os.environ.get("FRACTAL_SESSION_ID") or f"stub-{os.urandom(4).hex()}")
    print(f"stub agent: {os.environ.get('STEP_LABEL', '?')}", flush=True)
    if "resolve" in names and "## Mode: resolve" in prompt:
        return resolve(prompt)
    for key, value in todo:
        if key == "capture":
            import json
            from pathlib import Path

            out = Path(value)
            out.mkdir(parents=True, exist_ok=True)
            n = len(list(out.glob("call-*.json"))) + 1
            (out / f"call-{n}.json").write_text(json.dumps(
                {"argv": sys.argv, "env": dict(os.environ), "prompt": prompt, "cwd": os.getcwd()}))
        elif key in ("write", "append"):
            path, _, text = value.partition(":")
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "a" if key == "append" else "w") as fh:
                fh.write(text + "\n")
        elif key == "cost":
            emit("cost", usd=float(value))
        elif key == "sleep":
            time.sleep(float(value))
        elif key == "setsid-child":
            import subprocess

            child = subprocess.Popen(["setsid", "sleep", "600"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(value, "w") as fh:
                fh.write(str(child.pid))
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
            import subprocess

            proc = subprocess.run([sys.executable, "-m", "fractal", "commit", value],
                                  capture_output=True, text=True, check=False)
            print(f"fractal commit {value!r} -> exit {proc.returncode}", flush=True)
            print((proc.stdout + proc.stderr).strip(), flush=True)
            if proc.returncode != 0:
                return proc.returncode
        elif key == "done":
            import subprocess

            proc = subprocess.run([sys.executable, "-m", "fractal", "node", "done", "--reason",
                                   value], capture_output=True, text=True, check=False)
            print(f"fractal node done -> exit {proc.returncode}", flush=True)
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
            while not os.path.exists(value or "."):
                time.sleep(0.02)
        elif key == "hang-unless":
            while not os.path.exists(value or "."):
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


def resolve(prompt: str) -> int:
    """The ``[stub:resolve]`` marker: every file the resolve mode lists keeps both sides
    (the conflict's marker lines dropped), is added, and the merge is concluded."""
    import re
    import subprocess

    merging = subprocess.run(["git", "rev-parse", "-q", "--verify", "MERGE_HEAD"],
                             capture_output=True, check=False).returncode == 0
    if not merging:
        print("no merge in progress: the conflict is resolved already", flush=True)
        return 0
    listed = prompt.split("These files hold conflicts:", 1)[1].split("Before anything", 1)[0]
    files = re.findall(r"^- `([^`]+)`", listed, flags=re.MULTILINE)
    for rel in files:
        with open(rel) as fh:
            kept = [line for line in fh.read().splitlines()
                    if not re.match(r"^(<<<<<<<|=======|>>>>>>>)( |$)", line)]
        with open(rel, "w") as fh:
            fh.write("\n".join(kept) + "\n")
        subprocess.run(["git", "add", rel], check=True)
    proc = subprocess.run(["git", "commit", "-q", "--no-edit"], capture_output=True,
                          text=True, check=False)
    print(f"resolved {', '.join(files)} -> exit {proc.returncode}", flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
