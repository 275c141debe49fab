"""A cancelled status leaves nothing behind: not its git, not what its git started.

The backstop ends the status that lost the race (``PendingStatus.cancel``). ``git status``
starts processes of its own (a ``core.fsmonitor`` hook, a ``git status`` per submodule);
killing git alone orphaned them, and in the supervisor (a subreaper) each stayed as a
zombie for the rest of the run. The cancel runs in a subreaper child here, as in the
supervisor; the hook is let go as soon as the cancel is under way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import gated_fsmonitor, git_with_identity

_PROBE = r"""
import json, os, sys, threading
from pathlib import Path
from fractal.procs.processes import become_subreaper
from fractal.workspace.status_ahead import start_worktree_status

repo, started, gate = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
assert become_subreaper()
pending = start_worktree_status(repo)
assert pending is not None
with open(started, encoding="utf-8") as fh:  # the hook runs: git is in the middle
    hook = int(fh.read().strip())
ender = threading.Thread(target=pending.cancel, daemon=True)
ender.start()
fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)  # the hook may end now
os.write(fd, b"go\n")
os.close(fd)
ender.join(30)
try:
    state = Path(f"/proc/{hook}/stat").read_text().rsplit(")", 1)[1].split()[0]
except OSError:
    state = "gone"
print(json.dumps({"cancel_returned": not ender.is_alive(), "hook": state}))
"""

def test_a_cancelled_status_leaves_no_process_behind(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git_with_identity(repo, "init", "-q", "-b", "main")
    git_with_identity(repo, "commit", "-q", "--allow-empty", "-m", "one")
    started, gate = gated_fsmonitor(monkeypatch, tmp_path)
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(repo), str(started), str(gate)],
                           capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parents[2])
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"cancel_returned": True, "hook": "gone"}
