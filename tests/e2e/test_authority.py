"""Who may act on whom, through the real CLI: a child's agent (a ``command``-backend script
run by the real supervisor in a private tmux server) tries every verb on its parent and on
its sibling, and every tree-wide verb; each is refused, exit 1, recorded as a ``failed``
event, and nothing changes. The same agent rewriting ``_NODE`` to its parent's directory,
or dropping it and passing ``--path`` of the main checkout, is refused the same way: its
processes descend from its own supervisor. And no secret of the starting shell reaches the argv of a
long-lived process or a notify command's argv or environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, recording_hook, wait_until

pytestmark = pytest.mark.e2e

NODE_VERBS: list[tuple[str, list[str]]] = [  # (event recorded, argv with TARGET)
    ("stop", ["node", "stop", "TARGET"]),
    ("finish", ["node", "finish", "TARGET"]),
    ("finish_cancel", ["node", "finish", "--cancel", "TARGET"]),
    ("pause", ["node", "pause", "TARGET"]),
    ("resume", ["node", "resume", "TARGET"]),
    ("kill", ["node", "kill", "TARGET"]),
    ("start", ["node", "start", "TARGET"]),
    ("update", ["node", "update", "TARGET", "--title", "hijacked"]),
    ("spawn", ["node", "init", "intruder", "--parent", "TARGET", "--max-cost", "0.1"]),
    ("approve", ["node", "approve", "TARGET"]),
    ("merge", ["node", "merge", "TARGET"]),
    ("diff", ["node", "diff", "TARGET"]),
    ("conflicts", ["node", "conflicts", "TARGET"]),
    ("retire", ["node", "retire", "TARGET"]),
    ("unretire", ["node", "unretire", "TARGET"]),
    ("delete", ["node", "delete", "TARGET", "--force"]),
]
TREE_VERBS: list[tuple[str, list[str]]] = [
    ("brake", ["pause"]),
    ("release", ["resume"]),
    ("reset", ["reset", "--force"]),
    ("destroy", ["destroy", "--force"]),
    ("notify", ["inbox", "notify", "touch owned"]),
    ("ack", ["inbox", "ack", "anything"]),
]
TARGETS = ("main.a", "main.a.c")  # the agent's parent and its sibling


def _attempts() -> list[tuple[str, str, list[str]]]:
    """(event, target node, argv): everything the agent tries."""
    out = [(event, target, [target if a == "TARGET" else a for a in argv])
           for target in TARGETS for event, argv in NODE_VERBS]
    return out + [(event, "main", argv) for event, argv in TREE_VERBS]


def _agent_script(attempts: Path, results: Path, pose: str = "") -> str:
    """A command-backend agent (Python) that runs each attempt through the CLI's entry
    point in its own process, as a tool the agent runs would (its environment carries the
    loop's ``_NODE``), and appends ``{argv, rc, stderr}`` lines to ``results``. One
    process for all the attempts keeps the test inside its time limit on a loaded
    machine; each attempt still parses its argv and builds its own context.

    ``pose`` makes it pose first: ``node=DIR`` rewrites ``_NODE`` to DIR (another node's
    directory), ``path=DIR`` drops ``_NODE`` and passes ``--path DIR`` to every attempt."""
    return f"""#!{sys.executable}
import contextlib, io, json, os, sys
sys.stdin.read()
from fractal.cli import main
pose = {pose!r}
extra = []
if pose.startswith("node="):
    os.environ["_NODE"] = pose[5:]
elif pose.startswith("path="):
    os.environ.pop("_NODE", None)
    extra = ["--path", pose[5:]]
os.makedirs(os.path.dirname({str(results)!r}), exist_ok=True)
with open({str(results)!r}, "a") as out:
    for argv in json.loads(open({str(attempts)!r}).read()):
        err = io.StringIO()
        rc = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main([*argv, *extra])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
        out.write(json.dumps({{"argv": argv, "rc": rc, "stderr": err.getvalue()}}) + "\\n")
print(json.dumps({{"type": "cost", "usd": 0.0}}))
"""


def _state(tree: Tree) -> tuple[object, ...]:
    """What any of the verbs would change: registry rows, runs, signals, steps, configs,
    the root config, worktrees and branches."""
    nodes = tree.sql("SELECT node, status, max_cost, title FROM nodes WHERE node != "
                     "'main.a.b' ORDER BY node")
    runs = tree.sql("SELECT run_id, node, status FROM runs WHERE node != 'main.a.b'")
    signals = tree.sql("SELECT s.run_id, s.signal FROM signals s JOIN runs r "
                       "ON r.run_id = s.run_id WHERE r.node != 'main.a.b'")
    configs = tuple((b, (tree.repo / ".worktrees" / b / ".fractal" / b / "config.json")
                     .read_text()) for b in TARGETS)
    root = (tree.repo / ".fractal" / "main" / "config.json").read_text()
    worktrees = sorted(p.name for p in (tree.repo / ".worktrees").iterdir()
                       if not p.name.startswith("."))
    branches = subprocess.run(["git", "-C", str(tree.repo), "branch", "--format",
                               "%(refname:short)"], capture_output=True, text=True,
                              check=True).stdout.split()
    return nodes, runs, signals, configs, root, worktrees, sorted(branches)


def _hostile_child(tree: Tree, tmp_path: Path, pose: str = "") -> list[dict[str, object]]:
    """Run ``main.a.b``, whose one step is the hostile agent (posing as ``pose`` says),
    to completion; return its attempts. Asserts that nothing changed."""
    results = tree.node_dir("a.b") / "tmp" / "attempts.jsonl"  # writable in a sandbox too
    planned = tmp_path / "attempts.json"
    planned.write_text(json.dumps([argv for _e, _t, argv in _attempts()]))
    agent = tmp_path / "hostile-agent"
    tree.node("a", {"01-A.md": "lead"}, "--max-cost", "5")
    tree.cli("node", "init", "c", "--parent", "a", "--max-cost", "1")
    pose = pose.format(a=tree.node_dir("a"), repo=tree.repo)
    agent.write_text(_agent_script(planned, results, pose))
    agent.chmod(0o755)
    tree.cli("node", "init", "b", "--parent", "a", "--max-cost", "1", "--no-sync",
             "--max-iters", "1", "--agent", str(agent), "--step-timeout", "10m")
    steps = tree.node_dir("a.b") / "steps"
    shutil.rmtree(steps)
    steps.mkdir()
    (steps / "01-TRY.md").write_text("try every verb on the parent and the sibling")
    git(tree.worktree("a.b"), "add", "-A")
    git(tree.worktree("a.b"), "commit", "-q", "-m", "one step", "--no-verify")
    before = _state(tree)
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=600) == "completed"
    attempts = [json.loads(line) for line in results.read_text().splitlines()]
    assert [a["argv"] for a in attempts] == [argv for _e, _t, argv in _attempts()]
    for attempt in attempts:
        assert attempt["rc"] == 1, attempt
        assert str(attempt["stderr"]).startswith("Error: "), attempt
        assert "Traceback" not in str(attempt["stderr"]), attempt
    failed = set(tree.sql("SELECT node, event FROM events WHERE status = 'failed' "
                          "AND actor = 'main.a.b'"))
    for event, target, argv in _attempts():
        assert (target, event) in failed, (event, target, argv)
    assert _state(tree) == before  # nothing changed
    assert not (tree.repo / "owned").exists()
    return attempts


def test_a_childs_agent_is_refused_every_verb_on_its_parent_and_sibling(
        tree: Tree, tmp_path: Path) -> None:
    _hostile_child(tree, tmp_path)


@pytest.mark.parametrize("pose", [
    pytest.param("node={a}", id="rewrites-_NODE-to-its-parent"),
    pytest.param("path={repo}", id="drops-_NODE-and-passes-the-roots-path"),
])
def test_a_childs_agent_posing_as_its_parent_or_the_operator_is_refused(
        tree: Tree, tmp_path: Path, pose: str) -> None:
    """Its processes descend from its supervisor, so they act as main.a.b whatever
    ``_NODE`` or ``--path`` say: every attempt is refused as a disagreement."""
    attempts = _hostile_child(tree, tmp_path, pose)
    for attempt in attempts:
        assert "runs under main.a.b's supervisor" in str(attempt["stderr"]), attempt


SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-secret-0001", "OPENAI_API_KEY": "sk-secret-0002",
           "GH_TOKEN": "ghp_secret0003", "SLACK_BOT_TOKEN": "xoxb-secret-0004"}


def _argv_of_everything() -> list[str]:
    """The command lines of every process on the machine we may read."""
    lines: list[str] = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        lines.append(" ".join(cmdline))
    return lines


def test_no_secret_reaches_a_long_lived_argv_nor_a_notify_command(
        tree: Tree, tmp_path: Path) -> None:
    hook, calls = recording_hook(tmp_path, argv=True)
    tree.cli("inbox", "notify", str(hook), "--events", "exited")
    release = tmp_path / "release"
    tree.node("s", {"01-A.md": f"[stub:wait-file={release}][stub:fail=3]"}, "--no-sync",
              "--max-iters", "1", "--step-retry-backoff", "1s")  # the one retry at once
    env = {**os.environ, **SECRETS, "FRACTAL_NOTIFY_IDLE_S": "1",
           "FRACTAL_NOTIFY_BOOT_GRACE_S": "5"}  # the node is active from its start verb on
    tree.cli("node", "start", "s", env=env)
    supervisor = tree.supervisor("s")
    tree.wait_running("s")
    # every long-lived process is up now: the supervisor, its tmux server and pane, the
    # agent, the notify watcher
    panes = subprocess.run(["tmux", "-S", str(tree.socket), "list-panes", "-a", "-F",
                            "#{pane_start_command}"], capture_output=True, text=True,
                           check=False).stdout
    seen = [*_argv_of_everything(), panes, " ".join(supervisor.cmdline())]
    assert any("_run" in line for line in seen)  # the supervisor's argv was read
    for line in seen:
        for name, value in SECRETS.items():
            assert value not in line, (name, line)
    release.touch()
    assert tree.wait_settled("s", timeout=120) == "exited"
    # the hook writes its .argv file last: once it is there, the hook has run whole
    wait_until(lambda: list(calls.glob("*.argv")), timeout=60, message="the hook ran")
    (call,) = [json.loads(p.read_text()) for p in calls.glob("*.json")]
    assert [(e["kind"], e["node"]) for e in call["events"]] == [("exited", "main.s")]
    env_seen = next(calls.glob("*.env")).read_text()
    argv_seen = next(calls.glob("*.argv")).read_text()
    for name, value in SECRETS.items():
        assert value not in env_seen and f"{name}=" not in env_seen, name
        assert value not in argv_seen, name
    assert "FRACTAL_EVENT_NODE=main.s" in env_seen  # the event itself did arrive
