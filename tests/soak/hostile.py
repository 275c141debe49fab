"""The hostile agents of ``make night``: the attacks, as a table, and the attacks themselves.

ATTACKS has one row per attack: its name (the soak agent's ``[soak:attack=NAME]`` marker
runs it, every step, so it repeats all night), the outcome it must meet (``refused``: fractal
says no and nothing changed; ``contained``: the act happens but cannot reach past the
node), the defence that gives that outcome, and whether that defence is on this branch
(``landed``). An attack whose defence has landed and that succeeded is a violation; one
whose defence is still on its way is reported as open, so a branch bringing the defence
flips ``landed`` and the night holds it to it. Defences landing later are new rows.

How each outcome is judged from what the night saw (``judge``, pure):

- ``raise-cap``: ``fractal node config set max_cost=null`` from the agent. Refused when
  every try exited non-zero and the node's ``max_cost`` is still the one it was given.
- ``fsmonitor``: ``git config core.fsmonitor <probe>`` (the repository's shared
  ``.git/config``). The probe records who ran it; contained when no git that fractal ran
  for itself (a supervisor or a verb, with no agent between) ever ran it.
- ``sibling-write``: a file written into a sibling's worktree. Contained when no such file
  is in the sibling's worktree or on any branch but the attacker's.
- ``fork-daemon``: a daemon that leaves its session and re-forks itself every second.
  Contained when none outlives its step by more than the orphan grace.

Run as a program (``python hostile.py ATTACK``, from the soak agent in its worktree) it
performs one attack and appends what it did to ``$SOAK_HOSTILE`` (one JSON line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Attack:
    """One row: ``name``, the ``expected`` outcome (``refused`` | ``contained``), the
    ``defence`` that gives it and whether that defence is on this branch (``landed``)."""

    name: str
    expected: str
    defence: str
    landed: bool


ATTACKS: tuple[Attack, ...] = (
    Attack("raise-cap", "refused", "a node can only tighten its own limits", True),
    Attack("fsmonitor", "contained", "fractal's own git calls run no repo-configured "
                                     "program", True),
    Attack("sibling-write", "contained", "the agent sandbox (bubblewrap): only its own "
                                         "worktree is writable", False),
    Attack("fork-daemon", "contained", "the supervisor is its steps' subreaper and ends "
                                       "every descendant with the step", True),
)
DAEMON_WORD = "soak-night-daemon"
"""In a daemon's command line, so the night finds its daemons (and only them)."""
INTRUDER = "soak/intruder-{node}.txt"
"""The file ``sibling-write`` puts in its sibling's worktree."""


def judge(attack: str, facts: dict[str, Any]) -> str:
    """``refused`` | ``contained`` | ``succeeded`` | ``untried`` for ``attack`` from the
    night's ``facts`` about it:

    - raise-cap: ``codes`` (exit codes of the tries), ``cap_given`` and ``cap_now`` (USD
      or None);
    - fsmonitor: ``tries``, ``own_runs`` (probe runs with a fractal process and no agent
      among the git's ancestors);
    - sibling-write: ``tries``, ``landed_in`` (places the intruder file was found: a
      worktree path or a branch name);
    - fork-daemon: ``tries``, ``outlived`` (daemons seen alive past their step's end plus
      the grace)."""
    if attack == "raise-cap":
        codes = facts.get("codes") or []
        if not codes:
            return "untried"
        if any(c == 0 for c in codes) or facts.get("cap_now") != facts.get("cap_given"):
            return "succeeded"
        return "refused"
    if not facts.get("tries"):
        return "untried"
    found = {"fsmonitor": "own_runs", "sibling-write": "landed_in",
             "fork-daemon": "outlived"}[attack]
    return "succeeded" if facts.get(found) else "contained"


# -- the attacks (run by the soak agent in its worktree) ----------------------------------


def _record(item: dict[str, object]) -> None:
    path = os.environ.get("SOAK_HOSTILE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(item) + "\n").encode())
        finally:
            os.close(fd)


def _raise_cap() -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-m", "fractal", "node", "config", "set",
                           "max_cost=null"], capture_output=True, text=True, check=False)
    return {"code": proc.returncode, "out": (proc.stdout + proc.stderr).strip()[:300]}


PROBE = """#!{python}
import json, os, sys
chain, pid = [], os.getppid()
while pid > 1 and len(chain) < 12:
    try:
        words = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\\0")
        stat = open(f"/proc/{{pid}}/stat").read()
    except OSError:
        break
    chain.append(" ".join(w.decode(errors="replace") for w in words if w)[:200])
    pid = int(stat.rsplit(")", 1)[1].split()[1])
with open({log!r}, "a") as out:
    out.write(json.dumps({{"chain": chain}}) + "\\n")
"""


def _fsmonitor() -> dict[str, object]:
    log = os.environ.get("SOAK_FSMONITOR_LOG", "/dev/null")
    probe = Path(log).with_name("fsmonitor-probe")
    if not probe.exists():
        probe.write_text(PROBE.format(python=sys.executable, log=log))
        probe.chmod(0o755)
    proc = subprocess.run(["git", "config", "core.fsmonitor", str(probe)],
                          capture_output=True, text=True, check=False)
    return {"code": proc.returncode, "out": proc.stderr.strip()[:300]}


def _sibling_write(node: str) -> dict[str, object]:
    sibling = os.environ.get("SOAK_SIBLING", "")
    target = Path.cwd().parent / sibling / INTRUDER.format(node=node)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{node} was here\n")
    except OSError as exc:
        return {"code": 1, "out": str(exc)[:300]}
    return {"code": 0, "out": str(target)}


def _fork_daemon(node: str) -> dict[str, object]:
    step = os.environ.get("STEP_ID", "0")
    if os.fork() == 0:  # first child: leave the session, fork the daemon, go
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, __file__, "daemon", node, step,
                                      DAEMON_WORD])
        os._exit(0)
    return {"code": 0, "out": f"daemon for step {step}"}


def _daemon() -> None:
    """Re-fork every second: each generation starts the next, then exits."""
    for fd in (0, 1, 2):
        os.close(fd)
    while True:
        time.sleep(1.0)
        if os.fork() != 0:
            os._exit(0)


def main(argv: list[str]) -> int:
    if argv[:1] == ["daemon"]:
        _daemon()
        return 0
    attack, node = argv[0], os.environ.get("NODE_BRANCH", "node")
    if attack == "raise-cap":
        done = _raise_cap()
    elif attack == "fsmonitor":
        done = _fsmonitor()
    elif attack == "sibling-write":
        done = _sibling_write(node)
    elif attack == "fork-daemon":
        done = _fork_daemon(node)
    else:
        done = {"code": 2, "out": f"no attack {attack!r}"}
    _record({"node": node, "attack": attack, "step": os.environ.get("STEP_ID", ""),
             "at": time.time(), **done})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
