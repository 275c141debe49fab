"""A sandboxed child's hostile agent, through the real CLI: every write outside its own
work (the repository's git config and hooks, the database, a sibling's worktree, the main
checkout, its parent's worktree and step file, its own config.json and step file), a
signal to its supervisor, a command on fractal's tmux server and a daemon that re-forks
into new sessions all fail, while its own commit still lands. On the code before the
sandbox each of these succeeded."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import git, wait_until
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
def append(path, text="owned\\n"):
    with open(path, "a") as fh:
        fh.write(text)
    return path

def create(path, text="#!/bin/sh\\ntouch owned\\n"):
    with open(path, "x") as fh:
        fh.write(text)
    os.chmod(path, 0o755)
    return path

def database():
    import sqlite3
    db = sqlite3.connect(FACTS["db"], timeout=1)
    db.execute("UPDATE nodes SET max_cost = 1000000 WHERE node = 'main.a.b'")
    db.commit()
    return db.total_changes

def kill_supervisors():
    killed = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\\0")
        except OSError:
            continue
        if b"_run" in argv and b"node" in argv:
            os.kill(int(pid), 15)
            killed.append(int(pid))
    if not killed:
        raise LookupError("no supervisor in sight")
    return killed

def tmux():
    return subprocess.run(["tmux", "-S", FACTS["tmux"], "new-window", "-d",
                           "touch " + FACTS["tmux_marker"]], check=True,
                          capture_output=True, text=True).stdout

DAEMON = '''
import os, sys, time
token, beat = sys.argv[1], sys.argv[2]
end = time.time() + 90
while time.time() < end:
    if os.fork():
        os._exit(0)
    os.setsid()
    with open(beat, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(0.2)
'''

def daemon():
    os.makedirs(os.path.dirname(FACTS["beat"]), exist_ok=True)
    subprocess.Popen([sys.executable, "-c", DAEMON, FACTS["token"], FACTS["beat"]],
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while not os.path.exists(FACTS["beat"]):
        if time.time() > deadline:
            raise TimeoutError("the daemon never beat")
        time.sleep(0.05)
    return "started"

def own_commit():
    with open("work.txt", "w") as fh:
        fh.write("the agent's own work\\n")
    subprocess.run(["git", "add", "work.txt"], check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=agent@example.com",
                    "commit", "-q", "--no-verify", "-m", "agent: own work"], check=True,
                   capture_output=True)
    return "committed"

attempt("daemon", daemon)
attempt("git_config", lambda: append(FACTS["git_config"], "[core]\\n\\tfsmonitor = touch owned\\n"))
attempt("worktree_config", lambda: append(FACTS["worktree_config"], "[core]\\n\\tfsmonitor = touch owned\\n"))
attempt("hook", lambda: create(FACTS["hook"]))
attempt("database", database)
attempt("sibling", lambda: append(FACTS["sibling"]))
attempt("main_checkout", lambda: create(FACTS["main_checkout"]))
attempt("parent_worktree", lambda: create(FACTS["parent_worktree"]))
attempt("parent_step", lambda: append(FACTS["parent_step"]))
attempt("own_config", lambda: append(FACTS["own_config"], '{"max_cost": 1000000}'))
attempt("own_step", lambda: append(FACTS["own_step"]))
attempt("parent_branch", lambda: subprocess.run(["git", "branch", "-f", "main.a", "HEAD"],
        check=True, capture_output=True, text=True).stderr)
attempt("tmux", tmux)
attempt("kill_supervisor", kill_supervisors)
attempt("own_commit", own_commit)
"""

BLOCKED = ("git_config", "worktree_config", "hook", "database", "sibling", "main_checkout",
           "parent_worktree", "parent_step", "own_config", "own_step", "parent_branch", "tmux",
           "kill_supervisor")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def _daemons(token: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if token in (proc.info.get("cmdline") or []):
            found.append(proc.pid)
    return found


def test_a_sandboxed_agent_can_reach_nothing_but_its_own_work(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    token = f"hostile-daemon-{uuid.uuid4().hex}"
    facts = {
        "db": str(tree.db), "git_config": str(tree.repo / ".git" / "config"),
        "worktree_config": str(tree.gitdir("a.b") / "config.worktree"),
        "hook": str(tree.repo / ".git" / "hooks" / "post-checkout"),
        "sibling": str(tree.worktree("a.c") / "README.md"),
        "main_checkout": str(tree.repo / "owned.txt"),
        "parent_worktree": str(tree.worktree("a") / "owned.txt"),
        "parent_step": str(tree.node_dir("a") / "steps" / "01-A.md"),
        "own_config": str(tree.node_dir("a.b") / "config.json"),
        "own_step": str(tree.node_dir("a.b") / "steps" / "01-TRY.md"),
        "tmux": str(tree.socket), "tmux_marker": str(tmp_path / "tmux-owned"),
        "token": token, "beat": str(tree.node_dir("a.b") / "tmp" / "daemon.beat"),
    }
    report_path = hostile_node(tree, tmp_path, ATTACKS, facts)
    watched = [Path(str(facts[k])) for k in ("git_config", "worktree_config", "hook",
                                             "sibling", "main_checkout", "parent_worktree",
                                             "parent_step", "own_config", "own_step")]
    before = {p: _digest(p) for p in watched}
    parent_tip = git(tree.repo, "rev-parse", "main.a")
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    for attack in BLOCKED:
        assert report[attack]["ok"] is False, (attack, report[attack])
    assert report["daemon"]["ok"] is True, report["daemon"]
    assert report["own_commit"]["ok"] is True, report["own_commit"]
    # nothing outside the agent's own work changed
    assert {p: _digest(p) for p in watched} == before
    assert git(tree.repo, "rev-parse", "main.a") == parent_tip
    assert not (tmp_path / "tmux-owned").exists()
    assert tree.sql("SELECT max_cost FROM nodes WHERE node = 'main.a.b'") == [(1.0,)]
    assert "agent: own work" in git(tree.repo, "log", "--format=%s", "main.a.b")
    # the supervisor ran its run to the end: no signal reached it
    assert tree.sql("SELECT status FROM runs WHERE node = 'main.a.b'") == [("completed",)]
    # the re-forking daemon ended with its step: none of its processes is left
    assert _daemons(token) == []
    beat = Path(str(facts["beat"]))
    last = beat.read_text()
    assert wait_until(lambda: _daemons(token) == [], timeout=2)
    assert beat.read_text() == last  # and none is still beating
