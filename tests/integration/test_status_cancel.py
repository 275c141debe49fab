"""A cancelled status started ahead ends with everything its git started.

The backstop ends the status that lost the race (``PendingStatus.cancel``). ``git status``
starts processes of its own (a ``core.fsmonitor`` hook, a ``git status`` per submodule)
that hold its stderr; killing git alone left them running, the cancel waiting on them,
and (the supervisor is a subreaper) their zombies with the supervisor for the run.
The cancel runs in a subreaper child here, as in the supervisor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import json, sys, threading
from pathlib import Path
from fractal.runtime.processes import become_subreaper
from fractal.workspace.status_ahead import start_worktree_status

repo, started = Path(sys.argv[1]), sys.argv[2]
assert become_subreaper()
pending = start_worktree_status(repo)
assert pending is not None
with open(started, encoding="utf-8") as fh:  # the hook runs: git is in the middle
    hook = int(fh.read().strip())
ender = threading.Thread(target=pending.cancel, daemon=True)
ender.start()
ender.join(10)
try:
    state = Path(f"/proc/{hook}/stat").read_text().rsplit(")", 1)[1].split()[0]
except OSError:
    state = "gone"
print(json.dumps({"cancel_returned": not ender.is_alive(), "hook": state}))
"""

_HOOK = """#!/bin/bash
echo $$ > "{started}"
exec 3<>"{gate}"
read -t 20 -u 3 line
"""


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=T", "-c", "user.email=t@e.invalid",
                    *args], check=True, capture_output=True)


def test_a_cancelled_status_ends_and_collects_what_git_started(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    started, gate = tmp_path / "started", tmp_path / "gate"
    os.mkfifo(started)
    os.mkfifo(gate)
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(_HOOK.format(started=started, gate=gate))
    hook.chmod(0o755)
    _git(repo, "config", "core.fsmonitor", str(hook))
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE, str(repo), str(started)],
                               capture_output=True, text=True, timeout=60,
                               cwd=Path(__file__).resolve().parents[2])
    finally:
        try:  # a hook still waiting is let go
            fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"go\n")
            os.close(fd)
        except OSError:
            pass
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"cancel_returned": True, "hook": "gone"}
