"""A small deterministic agent for the offline demo, run through the ``command`` backend.

It reads its prompt on stdin and the loop's variables from its environment, acts by
step name (the name in ``STEP_LABEL``), prints what it does like a coding agent would,
and reports its session and cost with the command backend's JSON lines. It spends
nothing, so it reports a cost of 0.0 (known to be free, not unknown).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

BUGGY = "return total / (len(values) - 1)"
FIXED = "return total / len(values)"
TARGET = Path("calc") / "stats.py"
THINK_SECONDS = {"SYNC": 0.1}
"""Seconds the agent pauses in a step before acting, by step name (0.3 for the others)."""
THINK_ENV = "FRACTAL_DEMO_THINK_S"
"""Overrides every step's pause, in seconds (``0`` runs the demo without pauses)."""


def think_seconds(name: str) -> float:
    """The pause before acting in step ``name``: ``THINK_ENV`` when it holds a number
    from 0 to 10, else ``THINK_SECONDS`` (0.3 for a step it does not name)."""
    default = THINK_SECONDS.get(name, 0.3)
    try:
        value = float(os.environ.get(THINK_ENV, default))
    except ValueError:
        return default
    return value if 0.0 <= value <= 10.0 else default


def _say(text: str) -> None:
    print(text, flush=True)


def _event(kind: str, **fields: object) -> None:
    print(json.dumps({"type": kind, **fields}), flush=True)


def _tests() -> tuple[bool, str]:
    proc = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-q"],
                          capture_output=True, text=True, check=False)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else ""


def _step_name() -> str:
    label = os.environ.get("STEP_LABEL", "")
    if label.startswith("SYNC"):
        return "SYNC"
    match = re.search(r"\(([^)]*)\)\s*$", label)
    return match.group(1) if match else ""


def prepare() -> None:
    _event("tool", name="read", detail="NODE.md")
    ok, summary = _tests()
    _event("tool", name="bash", detail="python -m unittest discover -s tests")
    _say(f"The test suite is {'green' if ok else 'red'}: {summary}")


def plan() -> None:
    plans = Path(os.environ.get("PLANS_DIR", "plans"))
    plans.mkdir(parents=True, exist_ok=True)
    ok, _ = _tests()
    text = "Nothing left to do: the tests pass.\n" if ok else (
        f"1. {TARGET}: mean() divides by len(values) - 1; divide by len(values).\n"
        "2. Run the tests.\n")
    note = plans / f"{os.environ.get('ITER_REF', '0.0')}-plan.md"
    note.write_text(f"# Plan for iteration {os.environ.get('ITER_REF', '')}\n\n{text}")
    _event("tool", name="write", detail=str(note))
    _say(text.strip())


def execute() -> None:
    source = TARGET.read_text()
    if BUGGY not in source:
        _say("mean() already divides by the number of values; nothing to change.")
        return
    TARGET.write_text(source.replace(BUGGY, FIXED))
    _event("tool", name="edit", detail=str(TARGET))
    _say(f"Fixed the off-by-one in mean(): {FIXED}")


def review() -> None:
    _event("tool", name="bash", detail="python -m unittest discover -s tests")
    ok, summary = _tests()
    _say(f"Tests {'pass' if ok else 'still fail'}: {summary}")
    if not ok:
        sys.exit(1)


def commit() -> None:
    """Commit the iteration's work with ``fractal commit`` (the loop's own CLI, same venv)."""
    fixed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(TARGET)],
                           capture_output=True, check=False).returncode == 1
    message = "fix the off-by-one in mean()" if fixed else "record the iteration plan"
    _event("tool", name="bash", detail=f'fractal commit "{message}"')
    proc = subprocess.run([sys.executable, "-P", "-m", "fractal", "commit", message],
                          capture_output=True, text=True, check=False)
    for line in (proc.stdout + proc.stderr).strip().splitlines():
        _say(f"  {line}")
    if proc.returncode != 0:
        _say(f"fractal commit failed (exit {proc.returncode}); the loop's backstop will save "
             "the work")
        sys.exit(proc.returncode)
    _say(f'Committed with `fractal commit "{message}"`.')


def sync() -> None:
    _say("No messages and no children to check.")


ACTIONS = {"PREPARE": prepare, "PLAN": plan, "EXECUTE": execute, "REVIEW": review,
           "COMMIT": commit, "SYNC": sync}


def main() -> None:
    """Entry point: read the prompt, act for the current step, report session and cost."""
    prompt = sys.stdin.read()
    session = os.environ.get("FRACTAL_SESSION_ID") or f"demo-{uuid.uuid4().hex[:12]}"
    _event("session", id=session)
    _event("model", id="demo-agent-1")
    name = _step_name()
    _say(f"[demo agent] {os.environ.get('STEP_LABEL', '?')} (prompt: {len(prompt)} characters)")
    time.sleep(think_seconds(name))  # a pause to watch, like a real agent thinking
    action = ACTIONS.get(name)
    if action is None:
        _say(f"I have no routine for step {name!r}; doing nothing.")
    else:
        action()
    _event("cost", usd=0.0)


if __name__ == "__main__":
    main()
