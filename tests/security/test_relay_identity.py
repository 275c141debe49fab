"""A sandboxed agent's ``fractal`` commands reach the ledger only through its own
supervisor's relay, as its own node: forging ``_NODE`` or ``--path`` to pose as its parent
or as the operator is refused and recorded against ``main.a.b``, the operator-only brake
is refused, a read works, ``fractal commit``'s hook runs in the agent's sandbox, and with the relay variable dropped the command finds no tree
(the database is hidden). On the code before the relay the brake and the reads went
straight to the database, and a dropped ``_NODE`` outside any supervisor was the
operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_authority import _hostile_child
from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

COMMANDS = """
def fractal(*args, env=None, drop_relay=False, stdin=None):
    environ = dict(os.environ if env is None else env)
    if drop_relay:
        environ.pop("FRACTAL_RELAY", None)
    done = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, env=environ, timeout=120, input=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout

attempt("status", lambda: fractal("node", "status", "main.a.b"))
attempt("post", lambda: fractal("radio", "post", "-", stdin="posted through the relay"))
attempt("pause_parent_as_parent", lambda: fractal(
    "node", "pause", "main.a", env={**os.environ, "_NODE": FACTS["parent_dir"]}))
attempt("pause_parent_as_operator", lambda: fractal(
    "node", "pause", "main.a", "--path", FACTS["repo"],
    env={k: v for k, v in os.environ.items() if k != "_NODE"}))
attempt("brake", lambda: fractal("pause"))
attempt("brake_as_operator", lambda: fractal(
    "pause", "--path", FACTS["repo"],
    env={k: v for k, v in os.environ.items() if k != "_NODE"}))
attempt("direct", lambda: fractal("node", "status", "main.a.b", drop_relay=True))
def lint_hook():
    os.makedirs(os.path.join(os.environ["NODE_DIR"], "scripts"), exist_ok=True)
    with open(os.path.join(os.environ["NODE_DIR"], "scripts", "lint.sh"), "w") as fh:
        fh.write("echo owned > " + FACTS["hook_marker"] + "\\n")
    with open("work.txt", "w") as fh:
        fh.write("work\\n")
    return fractal("commit", "the agent's work")

def pre_commit():
    with open("payload.sh", "w") as fh:
        fh.write("echo owned > " + FACTS["precommit_marker"] + "\\n")
    return fractal("commit", "the agent's payload")

attempt("pre_commit", pre_commit)
attempt("lint_hook", lint_hook)
attempt("relays", lambda: sorted(os.listdir(os.path.dirname(FACTS["parent_relay"]))))
"""


def test_a_sandboxed_agents_commands_run_as_its_own_node(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    facts = {"parent_dir": str(tree.node_dir("a")), "repo": str(tree.repo),
             "hook_marker": str(tree.repo / "hook-owned.txt"),
             "precommit_marker": str(tmp_path / "precommit-owned.txt"),
             "parent_relay": str(tree.repo / ".fractal" / "main" / "relay" / "main.a.sock")}
    report_path = hostile_node(tree, tmp_path, COMMANDS, facts)
    # the operator's pre-commit hook runs what the worktree holds (as the pre-commit
    # framework runs what .pre-commit-config.yaml names)
    hook = tree.repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n[ -f payload.sh ] && sh payload.sh\nexit 0\n")
    hook.chmod(0o755)
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    assert report["status"]["ok"] is True, report["status"]
    assert str(report["status"]["detail"]).startswith("active (run 1)")  # its own run
    assert report["post"]["ok"] is True, report["post"]  # stdin forwarded for `-`
    assert ("main.a.b", "posted through the relay") in tree.sql(
        "SELECT sender, data FROM messages")
    for refused in ("pause_parent_as_parent", "pause_parent_as_operator", "brake",
                    "brake_as_operator"):
        assert report[refused]["ok"] is False, (refused, report[refused])
        assert "exit 1: Error: " in str(report[refused]["detail"]), report[refused]
    assert report["direct"]["ok"] is False, report["direct"]
    # a commit the agent asked for runs no repository program outside its sandbox
    assert report["pre_commit"]["ok"] is True, report["pre_commit"]
    assert not (tmp_path / "precommit-owned.txt").exists()
    assert "the agent's payload" in git(tree.repo, "log", "--format=%s", "main.a.b")
    # fractal commit's hook ran in the agent's sandbox: its write outside failed
    assert report["lint_hook"]["ok"] is False, report["lint_hook"]
    assert "lint.sh failed" in str(report["lint_hook"]["detail"]), report["lint_hook"]
    assert not (tree.repo / "hook-owned.txt").exists()
    assert report["relays"] == {"ok": True, "detail": "['main.a.b.sock']"}  # no other
    # every refusal is recorded against the agent's node, none as the operator
    failed = tree.sql("SELECT node, event, actor FROM events WHERE status = 'failed'")
    assert ("main.a", "pause", "main.a.b") in failed
    assert ("main", "brake", "main.a.b") in failed
    assert not [row for row in failed if row[2] == "operator"]
    assert tree.status("a") == "idle"
    assert not (tree.repo / ".fractal" / "main" / ".paused").exists()


def test_every_verb_on_its_parent_and_sibling_is_refused_through_the_relay(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    """The authority e2e's hostile child, sandboxed: each of its verbs goes through its
    relay, and each is refused, recorded against it, and changes nothing."""
    _hostile_child(sandboxed_tree, tmp_path)
