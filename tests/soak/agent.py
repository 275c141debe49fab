#!/usr/bin/env python3
"""The soak agent: a ``command``-backend agent that writes journaled bytes into its worktree.

Every chunk it writes is first made durable in the worktree (write + fsync), then recorded
in the journal (``$SOAK_JOURNAL``, one JSON line per chunk, appended with ``O_APPEND``). So
a journal line proves the bytes reached the worktree; the invariant checker
(tests/soak/invariants.py) then demands that each journaled chunk is still on disk or
committed on the node branch, whatever was killed in between.

Markers in the prompt decide what it does (all optional; a merge handed back is concluded
first, its deletions recorded in ``$SOAK_HANDBACKS``, then ``merge-children``, then the
rest in this order):

  [soak:chunks=N]        write N chunks: each a new file soak/<node>/<step>-<k>.txt and one
                         line appended to soak/<node>/log.txt
  [soak:pace=S]          sleep up to S seconds (random) before each chunk
  [soak:files=N]         write N more files of 4 KiB each in one go (a large backstop)
  [soak:commit=MESSAGE]  run ``python -m fractal commit MESSAGE`` in the worktree; a non-zero
                         exit is printed, not fatal
  [soak:wait-file=PATH]  wait until PATH exists (a test's release handle)
  [soak:usage-file=PATH] while PATH exists, report a closed usage window that reopens at
                         the epoch second PATH holds (a ``usage_limit`` line) and exit 1
  [soak:conflict=NAME]   write this node's own version of soak/conflict/NAME.txt (siblings
                         given the same NAME conflict when merged)
  [soak:radio=N]         send N radio messages to the parent; each one the CLI accepted is
                         recorded in ``$SOAK_RADIO`` (one JSON line: node, subject)
  [soak:merge-children]  ``fractal node merge --hand-back`` each settled direct child
  [soak:attack=A,B]      perform the hostile attacks A, B, ... in turn (tests/soak/hostile.py)
  [soak:quiet-file=PATH] sleep while PATH exists (the tree driver's quiet phase)
  [soak:sleep=S]         sleep S seconds at the end
  [soak:fail=N]          exit N at the end, after 64 KiB on stderr

Randomness comes from ``SOAK_SEED`` and ``STEP_ID``, so a seed replays the same work.

Each record (``$SOAK_JOURNAL``, ``$SOAK_HANDBACKS``, ``$SOAK_MERGES``, ``$SOAK_RADIO``) is an
absolute path, or a path relative to the node's own directory (``$NODE_DIR``, e.g.
``tmp/soak/journal.jsonl``): a sandboxed agent may write only there and in its worktree,
so a sandboxed tree's driver names relative records and gathers them from every node dir
(``record_path``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

MARKER = re.compile(r"\[soak:([a-z-]+)(?:=([^\]]*))?\]")


def _emit(kind: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"type": kind, **fields}) + "\n")
    sys.stdout.flush()


def record_path(env: str) -> str | None:
    """Where the record named by the environment variable ``env`` goes: its value when
    absolute, else that path under ``$NODE_DIR`` (its directory made); None when unset."""
    value = os.environ.get(env)
    if not value:
        return None
    if os.path.isabs(value):
        return value
    path = os.path.join(os.environ.get("NODE_DIR") or os.getcwd(), value)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def _journal(path: str, text: str) -> None:
    journal = record_path("SOAK_JOURNAL")
    if not journal:
        return
    line = (json.dumps({"worktree": os.getcwd(), "branch": os.environ.get("NODE_BRANCH", ""),
                        "path": path, "text": text}) + "\n").encode()
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(rel: str, text: str, *, append: bool, proof: str | None = None) -> None:
    """Make ``text`` durable at ``rel`` (worktree-relative), then journal it (or just
    ``proof``, a part of it that identifies it)."""
    target = Path(rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if append else "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    _journal(rel, text if proof is None else proof)


def _record(env: str, item: dict[str, object]) -> None:
    path = record_path(env)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(item) + "\n").encode())
        finally:
            os.close(fd)


def _resolve_conflicts(node: str) -> None:
    """A conflict handed back by a parent's merge: keep this node's side of every
    conflicted file and conclude the merge (what a resolving agent would commit). First the
    target's files the merge left out are recorded (node, target tip, paths; node
    directories aside, they never travel): no soak agent deletes a file, so a hand-back
    that leaves one out has read the target's work as deleted by this node."""
    merging = subprocess.run(["git", "rev-parse", "-q", "--verify", "MERGE_HEAD"],
                             capture_output=True, text=True, check=False).stdout.strip()
    if not merging:
        return
    listed = subprocess.run(["git", "diff", "--name-only", "--diff-filter=U"],
                            capture_output=True, text=True, check=False)
    paths = [p for p in listed.stdout.splitlines() if p]
    gone = subprocess.run(["git", "diff", "--cached", "--name-only", "--diff-filter=D",
                           merging, "--", ".", ":(exclude).fractal"],
                          capture_output=True, text=True, check=False)
    _record("SOAK_HANDBACKS", {"node": node, "target": merging, "conflicts": paths[:20],
                               "deleted": [p for p in gone.stdout.splitlines() if p][:20]})
    for path in paths:
        subprocess.run(["git", "checkout", "--ours", "--", path], capture_output=True,
                       check=False)
        subprocess.run(["git", "add", "--", path], capture_output=True, check=False)
    proc = subprocess.run(["git", "commit", "--no-edit", "-q", "--no-verify"],
                          capture_output=True, text=True, check=False)
    print(f"resolved {len(paths)} conflict(s) -> exit {proc.returncode}", flush=True)


def _merge_children(node: str) -> None:
    """Merge each settled direct child (a conflict is handed back to it); every outcome is
    recorded in ``$SOAK_MERGES`` (node, child, exit code, stdout)."""
    listed = subprocess.run([sys.executable, "-m", "fractal", "node", "list", "--csv"],
                            capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines()[1:]:
        child, status = ([*line.split(","), "", ""])[:2]
        if child.rpartition(".")[0] != node or status not in ("completed", "stopped"):
            continue
        proc = subprocess.run([sys.executable, "-m", "fractal", "node", "merge", child,
                               "--hand-back"], capture_output=True, text=True, check=False)
        _record("SOAK_MERGES", {"node": node, "child": child, "code": proc.returncode,
                                "out": proc.stdout.strip()[:80],
                                "err": proc.stderr.strip()[:200]})
        print(f"merge {child} -> exit {proc.returncode}", flush=True)


def main() -> int:
    prompt = sys.stdin.read()
    todo = {m.group(1): m.group(2) or "" for m in MARKER.finditer(prompt)}
    step_id = os.environ.get("STEP_ID", "0")
    node = os.environ.get("NODE_BRANCH", "node")
    rng = random.Random(f"{os.environ.get('SOAK_SEED', '0')}:{node}:{step_id}")
    _emit("session", id=os.environ.get("FRACTAL_SESSION_ID") or f"soak-{uuid.uuid4().hex[:8]}")
    print(f"soak agent: {os.environ.get('STEP_LABEL', '?')}", flush=True)
    base = f"soak/{node}"
    _resolve_conflicts(node)
    if "merge-children" in todo:  # first, while the worktree holds only committed work
        _merge_children(node)
    pace = float(todo.get("pace") or 0)
    for number in range(1, int(todo.get("chunks") or 0) + 1):
        time.sleep(rng.uniform(0, pace))
        token = uuid.UUID(int=rng.getrandbits(128)).hex
        _write(f"{base}/{step_id}-{number}.txt", f"{token}\n", append=False)
        _write(f"{base}/log.txt", f"step {step_id} chunk {number} {token}\n", append=True)
    for number in range(1, int(todo.get("files") or 0) + 1):
        token = f"{uuid.UUID(int=rng.getrandbits(128)).hex}\n"
        _write(f"{base}/bulk/{step_id}-{number:04d}.txt", token + "x" * 4064 + "\n",
               append=False, proof=token)
    if "usage-file" in todo:
        flag = Path(todo["usage-file"])
        with contextlib.suppress(OSError, ValueError):
            resets = int(flag.read_text().strip())
            _emit("usage_limit", resets_at=resets, window="five_hour")
            return 1
    if "conflict" in todo:
        conflict = Path(f"soak/conflict/{todo['conflict']}.txt")  # rewritten each step:
        conflict.parent.mkdir(parents=True, exist_ok=True)  # not journaled
        conflict.write_text(f"{node} {step_id}\n")
    for number in range(1, int(todo.get("radio") or 0) + 1):
        subject = f"{node} {step_id} {number} {uuid.UUID(int=rng.getrandbits(128)).hex[:12]}"
        proc = subprocess.run([sys.executable, "-m", "fractal", "radio", "send", "soak",
                               "--parent", "--subject", subject, "--priority", "3"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            _record("SOAK_RADIO", {"node": node, "subject": subject})
    for name in [a for a in todo.get("attack", "").split(",") if a]:
        attack = subprocess.run([sys.executable, str(Path(__file__).with_name("hostile.py")),
                                 name], capture_output=True, text=True, check=False)
        print(f"attack {name} -> exit {attack.returncode}", flush=True)
    if "commit" in todo:
        proc = subprocess.run([sys.executable, "-m", "fractal", "commit", todo["commit"]],
                              capture_output=True, text=True, check=False)
        print(f"fractal commit -> exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()}",
              flush=True)
    if "wait-file" in todo:
        while not Path(todo["wait-file"]).exists():
            time.sleep(0.02)
    if "quiet-file" in todo:
        while Path(todo["quiet-file"]).exists():
            time.sleep(0.5)
    if "sleep" in todo:
        time.sleep(float(todo["sleep"]))
    _emit("cost", usd=0.001)
    if "fail" in todo:
        sys.stderr.write(f"soak agent failing with exit {todo['fail']}\n" + "e" * 65536 + "\n")
        return int(todo["fail"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
