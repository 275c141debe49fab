#!/usr/bin/env python3
"""The agent of the worker-pool story (``tests/e2e/test_pool.py``): the pool's reviewer
and every worker, told apart by the prompt (only the pool's prompts list the pool).

Worker: the item id is the last segment of its branch (``NODE_BRANCH``). Every attempt is
appended to ``$STORY_DIR/attempts.txt``; an item listed in ``POOL_FAIL`` exits 3; one
listed in ``POOL_HOLD`` waits for ``$STORY_DIR/release`` first; otherwise it writes
``items/<id>.txt`` (the attempt's number in it), commits it with git and
reports ``fractal pool result "wrote <id> (attempt N)"``.

Reviewer: rejects every item listed in ``POOL_REJECT`` with ``fractal pool reject`` and
saves its prompt to ``$STORY_DIR/review-prompt.txt``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path


def fractal(*args: str) -> int:
    proc = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, check=False)
    print(f"fractal {' '.join(args)} -> {proc.returncode} {proc.stderr.strip()}", flush=True)
    return proc.returncode


def listed(name: str) -> set[str]:
    return set(filter(None, os.environ.get(name, "").split(",")))


def main() -> int:
    prompt = sys.stdin.read()
    story = Path(os.environ["STORY_DIR"])
    sys.stdout.write(json.dumps({"type": "session", "id": f"pool-{uuid.uuid4().hex[:8]}"})
                     + "\n")
    sys.stdout.flush()
    branch = os.environ.get("NODE_BRANCH", "")
    if f"## Worker pool {branch}" in prompt:
        (story / "review-prompt.txt").write_text(prompt)
        for item in sorted(listed("POOL_REJECT")):
            if fractal("pool", "reject", item, "--reason", "too short") != 0:
                return 1
        return 0
    item = branch.rsplit(".", 1)[-1]
    with (story / "attempts.txt").open("a") as log:
        log.write(item + "\n")
    attempt = (story / "attempts.txt").read_text().split().count(item)
    if item in listed("POOL_FAIL"):
        print(f"item {item} cannot be done", file=sys.stderr, flush=True)
        return 3
    if item in listed("POOL_HOLD"):
        while not (story / "release").exists():
            time.sleep(0.05)
    out = Path("items") / f"{item}.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text(f"{item} attempt {attempt}\n")
    for args in (["add", "items"], ["commit", "-q", "--no-verify", "-m",
                                     f"item {item} (attempt {attempt})"]):
        if subprocess.run(["git", *args], check=False).returncode != 0:
            return 1
    return fractal("pool", "result", f"wrote {item} (attempt {attempt})")


if __name__ == "__main__":
    sys.exit(main())
