"""A scripted lead that knows only its prompts, for the lead story (tests/e2e/test_lead_story.py).

``python lead_story.py`` reads its prompt on stdin and runs in its node's worktree. It
never hard-codes a fractal command: each one is read out of the prompt (the TREE mode
document, the SYNC body and its digest) and filled in. STORY_DIR (from the environment)
is where it saves every prompt and what each command did; STORY_APPROVE=no leaves the
children's gates to the operator.

- the SPAWN step: spawns ``one`` and ``two`` (both write ``shared.txt``: the second to be
  merged conflicts) without the template's gate, and ``gate`` with it (it commits its
  file in every step, so its branch holds work before the gate), then starts them;
- a SYNC while the children wait holds the loop: approves every gate its digest lists;
- the MERGE step (``wait: children``): merges every child whose run ended by the radio
  feed; a conflict is handed back with the protocol's ``--hand-back`` command; any other
  refusal is recorded and left;
- a SYNC while the run waits for a hand-back's re-merge: merges again every child the
  digest lists as handed back once it settled;
- whenever nothing is handed back any more (after MERGE, or after such a SYNC): ends its
  own run with the protocol's ``node done`` command.
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

STORY = Path(os.environ.get("STORY_DIR", "."))
SETTLED = ("completed", "stopped", "exited", "killed")


def fractal(command: str) -> subprocess.CompletedProcess[str]:
    """Run one command as the prompt spells it (its first word the program), logged in the
    pane and in STORY_DIR/commands.txt with its exit code."""
    argv = re.findall(r'"[^"]*"|\S+', command)
    argv = [a[1:-1] if a.startswith('"') else a for a in argv]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    print(f"$ {command} -> {proc.returncode}\n{proc.stdout}{proc.stderr}", flush=True)
    with (STORY / "commands.txt").open("a") as fh:
        fh.write(json.dumps({"command": command, "exit": proc.returncode,
                             "stderr": proc.stderr}) + "\n")
    return proc


def command(prompt: str, start: str) -> str:
    """The backticked command of the prompt that starts with ``start`` (``fractal ...``,
    the prompt spelling the run's fractal by its path), its whitespace made single."""
    start = start.replace("fractal", BIN, 1)
    for found in re.findall(rf"`({re.escape(BIN)}\s[^`]+)`", prompt):
        found = " ".join(found.split())
        if found.startswith(start):
            return found
    raise SystemExit(f"no `{start}` command in the prompt")


def done(prompt: str, reason: str) -> None:
    fractal(command(prompt, "fractal node done").replace("<what now holds>", reason))


def spawn(prompt: str) -> None:
    init = command(prompt, "fractal node init NAME")
    start = command(prompt, "fractal node start NAME")
    tasks = {"one": "[stub:write=shared.txt:one] [stub:resolve]",
             "two": "[stub:write=shared.txt:two] [stub:resolve]",
             "gate": "[stub:write=gate.txt:gate] [stub:commit=the gate part]"}
    for name, markers in tasks.items():
        task = STORY / f"{name}-task.md"
        task.write_text(f"Build the {name} part. {markers}\n")
        line = init if name == "gate" else re.sub(r" --gate \S+", "", init)
        fractal(line.replace("NAME", name).replace("TITLE", f"the {name} part")
                .replace("FILE", str(task)).replace(" N ", " 1 "))
    for name in tasks:
        fractal(start.replace("NAME", name))


def merge(prompt: str) -> None:
    feed = json.loads(fractal(command(prompt, "fractal radio feed") + " --json").stdout)
    ended = sorted({m["node"].rsplit(".", 1)[-1] for m in feed
                    if m["subject"].startswith(tuple(f"run {s}" for s in SETTLED))})
    plain = command(prompt, "fractal node merge NAME")
    hand_back = command(prompt, "fractal node merge NAME --hand-back")
    handed = []
    for name in ended:
        out = fractal(plain.replace("NAME", name))
        if out.returncode != 0 and "conflicts with" in out.stderr:
            fractal(hand_back.replace("NAME", name))
            handed.append(name)
    if not handed:
        done(prompt, "every child's work is merged")


def sync(prompt: str, label: str) -> None:
    if "waiting for children" in label and os.environ.get("STORY_APPROVE") != "no":
        for line in re.findall(r"^  - \w+ \w+ \(step \d+\): review .*$", prompt, re.M):
            fractal(re.findall(rf"`({re.escape(BIN)} node approve \S+)`", line)[0])
    elif "re-merge" in label:
        handed = re.findall(rf"^  - (\w+) \((\w+)\): once it settled, merge it again with "
                            rf"`({re.escape(BIN)} node merge \S+)`", prompt, re.M)
        merged = [fractal(again).returncode == 0 for _name, status, again in handed
                  if status in SETTLED]
        if handed and len(merged) == len(handed) and all(merged):
            done(prompt, "every child's work is merged, the hand-back too")


def main() -> int:
    prompt = sys.stdin.read()
    label = os.environ.get("STEP_LABEL", "")
    n = len(list(STORY.glob("prompt-*.txt")))
    (STORY / f"prompt-{n:03d}.txt").write_text(f"{label}\n{prompt}")
    if label.startswith("SYNC"):
        sync(prompt, label)
    elif "(SPAWN)" in label:
        spawn(prompt)
    elif "(MERGE)" in label:
        merge(prompt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
