"""A scripted lead agent that knows only what its prompts say (tests/e2e/test_delegation.py).

``python delegate_lead.py`` reads its prompt on stdin and runs in its node's worktree; it
never hard-codes a fractal command: each one is read out of the prompt (the TREE mode
document, the SYNC body and its digest) and filled in. STORY_DIR (from the environment) is
where it saves every prompt and what it did.

- the SPAWN step: spawns ``div`` and ``ops`` with the tree mode's ``node init`` command
  (each task, in a file, carries the stub agent's markers), then starts them;
- a SYNC while waiting for children: approves every gate the digest lists, with the
  digest's own command;
- the MERGE step (held by ``wait: children``): reads the radio feed with the tree mode's
  command and merges every child whose run-end notice is there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

BIN = os.environ.get("FRACTAL_BIN", "fractal")
"""The run's fractal, as the loop exports it and renders it into every prompt command."""


def fractal(command: str) -> str:
    """Run one command as the prompt spells it (``<FRACTAL_BIN> ...``: its first word is
    the program); exit 1 on a failure."""
    argv = re.findall(r'"[^"]*"|\S+', command)
    argv = [a[1:-1] if a.startswith('"') else a for a in argv]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    print(f"$ {command} -> {proc.returncode}\n{proc.stdout}{proc.stderr}", flush=True)
    if proc.returncode != 0:
        raise SystemExit(1)
    return proc.stdout


def command(prompt: str, start: str) -> str:
    """The backticked command of the prompt that starts with ``start`` (``fractal ...``,
    the prompt spelling the run's fractal by its path)."""
    start = start.replace("fractal", BIN, 1)
    for found in re.findall(rf"`({re.escape(BIN)} [^`]+)`", prompt):
        if found.startswith(start):
            return str(found)
    raise SystemExit(f"no `{start}` command in the prompt")


def main() -> int:
    prompt = sys.stdin.read()
    story = Path(os.environ["STORY_DIR"])
    label = os.environ.get("STEP_LABEL", "")
    n = len(list(story.glob("prompt-*.txt")))
    (story / f"prompt-{n:03d}.txt").write_text(f"{label}\n{prompt}")
    if label.startswith("SYNC"):
        if "waiting for children" in label:
            for line in re.findall(r"^  - \w+ \w+ \(step \d+\): review .*$", prompt, re.M):
                approve = re.findall(rf"`({re.escape(BIN)} node approve \S+)`", line)[0]
                fractal(approve)
                with (story / "approved.txt").open("a") as fh:
                    fh.write(f"{approve}\n")
        return 0
    if "(SPAWN)" in label:
        init = command(prompt, "fractal node init NAME")
        start = command(prompt, "fractal node start NAME")
        for name in ("div", "ops"):
            task = story / f"{name}-task.md"
            task.write_text(f"Build {name}. [stub:write={name}.txt:{name}]\n")
            fractal(init.replace("NAME", name).replace("TITLE", f"the {name} part")
                    .replace("FILE", str(task)).replace(" N ", " 1 ").replace("USD", "1"))
        for name in ("div", "ops"):
            fractal(start.replace("NAME", name))
    elif "(MERGE)" in label:
        feed = json.loads(fractal(command(prompt, "fractal radio feed") + " --json"))
        (story / "feed.json").write_text(json.dumps(feed))
        ended = sorted({m["node"].rsplit(".", 1)[-1] for m in feed
                        if m["subject"].startswith("run completed")})
        merge = command(prompt, "fractal node merge NAME")
        for name in ended:
            fractal(merge.replace("NAME", name))
        (story / "merged.txt").write_text("\n".join(ended) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
