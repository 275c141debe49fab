"""Scripted agents for the tree story (tests/e2e/test_tree_merge.py): ``lead``, ``one``, ``two``.

``python tree_story.py ROLE`` reads its prompt on stdin, runs in its node's worktree and
acts through the real ``fractal`` CLI, printing what it does (the pane shows it). STORY_DIR
(from the environment) is where the lead records what the test checks.

- lead: spawns ``one`` and ``two`` (each with a single work step and this script as its
  agent), starts them, waits for both to settle, merges ``one`` (clean), tries ``two``
  (a conflict: exit 1, its worktree byte-identical before and after, both recorded),
  hands the conflict back, waits for ``two`` to resolve it, and merges ``two`` again.
- one / two: each adds its own line after ``x = 0`` in ``calc/ops.py`` and commits it with
  ``fractal commit``. When the prompt carries the RESOLVE mode, ``two`` instead resolves
  every file it lists (keeping both sides), adds them and concludes the merge.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def fractal(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, check=False)
    print(f"$ fractal {' '.join(args)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}",
          flush=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"fractal {' '.join(args)} failed")
    return proc


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def snapshot(wt: Path) -> dict[str, str]:
    """Every file's sha1 (the git dir aside), HEAD, the index and the status."""
    files = {}
    for path in sorted(wt.rglob("*")):
        rel = path.relative_to(wt).as_posix()
        if ".git" in path.parts or not path.is_file() or rel.endswith((".log", ".err")) \
                or "/tmp/" in rel or rel.endswith((".wake", ".session", ".launch-env")):
            continue
        files[rel] = hashlib.sha1(path.read_bytes()).hexdigest()
    files["HEAD"] = git(wt, "rev-parse", "HEAD")
    files["index"] = git(wt, "ls-files", "-s")
    files["status"] = git(wt, "status", "--porcelain", "--untracked-files=all")
    return files


def status(name: str) -> str:
    return fractal("node", "status", name, check=False).stdout.split(" ", 1)[0].strip()


def wait_settled(name: str, runs_at_least: int = 1) -> None:
    """Poll ``node status`` (one CLI call a look) until the node is settled, then check
    in ``node activity`` that at least ``runs_at_least`` of its runs have ended (a node
    handed back still shows its first run's end until the second run starts)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if status(name) in ("completed", "stopped", "exited", "killed", "failed"):
            ended = fractal("node", "activity", name, "--json", check=False).stdout
            rows = json.loads(ended or "[]")
            runs_done = sum(1 for r in rows if r["kind"] == "run" and r["status"] not in
                            ("active", "paused", None, ""))
            if runs_done >= runs_at_least:
                return
        time.sleep(0.5)
    raise SystemExit(f"{name} never settled")


def spawn(name: str, wt: Path) -> None:
    agent = f"{sys.executable} {HERE} {name}"
    fractal("node", "init", name, "--agent", agent, "--max-iters", "1", "--no-sync",
            "--title", f"the {name} change")
    child_wt = wt.parent / f"{os.environ['NODE_BRANCH']}.{name}"
    steps = child_wt / ".fractal" / f"{os.environ['NODE_BRANCH']}.{name}" / "steps"
    for old in steps.iterdir():
        old.unlink()
    (steps / "01-WORK.md").write_text("Make the change of this node and commit it.\n")
    git(child_wt, "add", "-A")
    git(child_wt, "commit", "-q", "--no-verify", "-m", "the story's step")


def lead() -> int:
    wt = Path.cwd()
    story = Path(os.environ["STORY_DIR"])
    for name in ("one", "two"):
        spawn(name, wt)
    for name in ("one", "two"):
        fractal("node", "start", name)
    for name in ("one", "two"):
        wait_settled(name)
    fractal("node", "merge", "one")
    before = snapshot(wt)
    conflict = fractal("node", "merge", "two", check=False)
    after = snapshot(wt)
    (story / "conflict.json").write_text(json.dumps({
        "exit": conflict.returncode, "stderr": conflict.stderr, "before": before,
        "after": after}))
    fractal("node", "merge", "two", "--hand-back")
    wait_settled("two", runs_at_least=2)
    fractal("node", "merge", "two")
    (story / "lead-done").write_text("ok\n")
    return 0


def resolve(files: list[str]) -> None:
    for rel in files:
        path = Path(rel)
        kept = [line for line in path.read_text().splitlines()
                if not re.match(r"^(<<<<<<<|=======|>>>>>>>)( |$)", line)]
        path.write_text("\n".join(kept) + "\n")
        git(Path.cwd(), "add", rel)
    git(Path.cwd(), "commit", "-q", "--no-edit")
    print(f"resolved {', '.join(files)} and concluded the merge", flush=True)


def worker(name: str, prompt: str) -> int:
    if "## Mode: resolve" in prompt:
        section = prompt.split("These files hold conflicts:", 1)[1].split("Before anything", 1)[0]
        resolve(re.findall(r"^- `([^`]+)`", section, flags=re.MULTILINE))
        return 0
    ops = Path("calc/ops.py")
    ops.write_text(ops.read_text().replace("x = 0\n", f"x = 0\n{name} = '{name}'\n"))
    fractal("commit", f"add the {name} line")
    return 0


def main() -> int:
    role = sys.argv[1]
    prompt = sys.stdin.read()
    return lead() if role == "lead" else worker(role, prompt)


if __name__ == "__main__":
    sys.exit(main())
