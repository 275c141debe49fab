"""What a node's relay runs for its agent (issue 29, the review's cases 2 and 3). A
relayed verb runs as the supervisor, outside the sandbox and its PID namespace.

- Case 2: on the code before the fix, ``node init leak --task-file /proc/<pid>/environ``
  copied the environment of any process of the user (here a stand-in holding a secret,
  as another tree's launch holds its relay token) into the child's NODE.md, which the
  agent then read. Now the file is read by the ``fractal`` inside the sandbox (which
  cannot see that process) and only its content is sent; a task file in the worktree
  still works.
- Case 3: the hidden ``node _run --path <sibling's worktree>`` started the sibling, its
  supervisor a child of the attacker's, with no ``start`` event. Now only the verbs of
  the agent protocol run (``domain.relayed.RELAYED_VERBS``), and ``--path`` must name
  the node's own worktree; each refusal is recorded as a failed ``relay`` event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

SECRET = "relay-token-stand-in-5f0c2a9e"

COMMANDS = """
def fractal(*args):  # the console script, as an agent types it
    script = os.path.join(os.path.dirname(sys.executable), "fractal")
    done = subprocess.run([script, *args], capture_output=True, text=True, timeout=90)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout

def fractal_module(*args):  # ``python -m fractal``, the pane's own form
    done = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, timeout=90)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout

with open("own-task.md", "w") as out:
    out.write("OWN TASK FROM THE WORKTREE")
attempt("environ", lambda: fractal("node", "init", "leak", "--max-cost", "0.1",
                                   "--task-file", FACTS["environ"]))
attempt("probe", lambda: fractal("node", "init", "probe", "--parent", "nosuch",
                                 "--task-file", FACTS["probe"]))
attempt("own", lambda: fractal("node", "init", "kid", "--max-cost", "0.1",
                               "--task-file=own-task.md"))
attempt("run", lambda: fractal("node", "_run", "--path", FACTS["sibling"]))
attempt("run_module", lambda: fractal_module("node", "_run", "--path", FACTS["sibling"]))
attempt("notify", lambda: fractal("_notify", "--path", FACTS["sibling"]))
attempt("doctor", lambda: fractal("doctor"))
attempt("elsewhere", lambda: fractal("node", "status", "--path", FACTS["checkout"]))
attempt("status", lambda: fractal("node", "status"))
"""


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user outside any sandbox whose environment holds ``SECRET``
    (as a launch's bubblewrap holds its relay token)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"],
                            env={**os.environ, "FRACTAL_RELAY_TOKEN": SECRET},
                            cwd="/")
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _allow_depth(repo: Path, depth: int) -> None:
    """Write the tree's ``max_depth`` into the root config.json, as an operator would."""
    config = repo / ".fractal" / "main" / "config.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["max_depth"] = depth
    config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _files_holding(root: Path, text: bytes) -> list[Path]:
    """Every regular file under ``root`` (symlinks not followed) whose bytes hold
    ``text``."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink() and text in path.read_bytes():
                found.append(path)
    return found


def test_a_relayed_verb_opens_no_path_the_agent_names_and_runs_only_the_protocol(
        sandboxed_tree: Tree, tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    tree = sandboxed_tree
    _allow_depth(tree.repo, 3)  # main.a.b may spawn (the attack's route is node init)
    facts = {"environ": f"/proc/{holder.pid}/environ",
             "probe": f"/proc/{holder.pid}/cwd/.git",
             "sibling": str(tree.worktree("a.c")),
             "checkout": str(tree.repo)}
    report_path = hostile_node(tree, tmp_path, COMMANDS, facts)
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    # case 2: the other process's environment reached nothing the agent can read
    assert report["environ"]["ok"] is False, report["environ"]
    assert "cannot read" in str(report["environ"]["detail"])
    assert report["probe"]["ok"] is False, report["probe"]
    assert not _files_holding(tree.repo, SECRET.encode())
    assert not tree.sql("SELECT node FROM nodes WHERE node IN ('main.a.b.leak', "
                        "'main.a.b.probe')")
    # a task file in the node's own worktree still works: its content is carried
    assert report["own"] == {"ok": True, "detail": "main.a.b.kid\n"}, report["own"]
    assert "OWN TASK FROM THE WORKTREE" in (
        tree.node_dir("a.b.kid") / "NODE.md").read_text(encoding="utf-8")
    # case 3: the hidden verbs and an operator's verb are refused, naming why
    for verb in ("run", "run_module", "notify", "doctor"):
        assert report[verb]["ok"] is False, (verb, report[verb])
        assert "is not a verb a node's agent may run" in str(report[verb]["detail"])
    assert report["elsewhere"]["ok"] is False, report["elsewhere"]
    assert "is not in this node's worktree" in str(report["elsewhere"]["detail"])
    assert report["status"]["ok"] is True, report["status"]  # the protocol still runs
    # the sibling never ran, and nobody started it
    assert not tree.sql("SELECT 1 FROM runs WHERE node = 'main.a.c'")
    assert not tree.sql("SELECT 1 FROM events WHERE node = 'main.a.c' AND event = 'start'")
    assert tree.status("a.c") not in ("running", "booting")
    # each refusal is on the ledger, against the node that asked
    refused = tree.sql("SELECT metadata FROM events WHERE node = 'main.a.b' AND "
                       "event = 'relay' AND status = 'failed'")
    words = " ".join(str(m) for (m,) in refused)
    for verb in ("node _run", "_notify", "doctor", "node status"):
        assert verb in words, (verb, refused)
