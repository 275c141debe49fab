"""A relayed verb acts in the relay's own tree, as the relay's own node (issue 29, the
fourth review's cases 1 and 2). The relay used to run the verb in whatever directory
the agent sent, and the verb found "its" tree with git from there:

- Case 1: the agent makes a tree of its own inside its worktree (``fractal init``
  locally, with the relay variable unset, and ``"sandbox": "off"`` in that tree's
  config), then from that tree's child worktree asks its relay for ``node init d`` and
  ``node start d`` with ``_NODE`` naming the fake child. On the code before the fix a
  supervisor started on the operator's tmux socket, outside any sandbox, running the
  agent's script with the launch's relay token in its environment.
- Case 2: a directory whose ``.git`` file names another tree's git dir made every
  relayed verb act on that tree, as any of its non-root nodes (``_NODE`` naming it):
  a child made there, a radio post sent as that node.

Now a directory inside the worktree that lies in another repository is refused and
recorded as a failed ``relay`` event of the asking node, the verb runs in the worktree
as that node whatever ``_NODE`` says, and the token never reaches what the verb starts
(``fractal commit``'s ``scripts/lint.sh`` here). The same refusal covers ``commit``,
``wiki update``, ``pool status`` and ``radio post``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

COMMANDS = """
import shutil
W = os.getcwd()
ENV = {k: v for k, v in os.environ.items()
       if k not in ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES")}
LOCAL = {k: v for k, v in ENV.items() if k not in ("FRACTAL_RELAY", "_NODE")}

def run(argv, cwd, env, stdin=None):
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, input=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout

def fractal(*args, cwd=None, node=None, stdin=None, local=False):
    env = dict(LOCAL if local else ENV)
    if node is not None:
        env["_NODE"] = node
    return run([sys.executable, "-m", "fractal", *args], cwd or W, env, stdin)

# case 1: a tree of the agent's own making, nested in its worktree
fake = os.path.join(W, "x")
evil = os.path.join(fake, "evil.sh")
def make_fake():
    os.makedirs(fake)
    run(["git", "init", "-q", "-b", "main", "."], fake, LOCAL)
    with open(os.path.join(fake, "f"), "w") as out:
        out.write("hi\\n")
    run(["git", "add", "f"], fake, LOCAL)
    run(["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "init"],
        fake, LOCAL)
    with open(evil, "w") as out:
        out.write("#!/bin/sh\\ncat >/dev/null\\n{ echo ran; env | grep -c "
                  "FRACTAL_RELAY_TOKEN; } > " + FACTS["marker"] + "\\n")
    os.chmod(evil, 0o755)
    fractal("init", "--agent", evil, cwd=fake, local=True)
    config = os.path.join(fake, ".fractal", "main", "config.json")
    with open(config) as fh:
        data = json.load(fh)
    data["sandbox"] = "off"
    with open(config, "w") as fh:
        json.dump(data, fh)
    fractal("node", "init", "c", "--max-iters", "1", "--task", "crafted", cwd=fake,
            local=True)
    return "made"
attempt("make_fake", make_fake)
fake_child = os.path.join(fake, ".worktrees", "main.c")
fake_node = os.path.join(fake_child, ".fractal", "main.c")
attempt("fake_init", lambda: fractal("node", "init", "d", "--max-iters", "1", "--agent",
                                     evil, "--task", "t", cwd=fake_child, node=fake_node))
attempt("fake_start", lambda: fractal("node", "start", "d", cwd=fake_child, node=fake_node))

# case 2: a .git file naming another tree's git dir
other = os.path.join(W, "y")
os.makedirs(other)
with open(os.path.join(other, ".git"), "w") as out:
    out.write("gitdir: " + FACTS["victim_git"] + "\\n")
victim = FACTS["victim_node"]
attempt("victim_init", lambda: fractal("node", "init", "pwned", "--parent", "v",
                                       "--max-iters", "1", "--task", "planted", cwd=other,
                                       node=victim))
attempt("victim_list", lambda: fractal("node", "list", cwd=other, node=victim))

# a symbolic link in the worktree to that directory is the same directory
os.symlink(other, os.path.join(W, "z"))
attempt("victim_link", lambda: fractal("radio", "post", "-", cwd=os.path.join(W, "z"),
                                       node=victim, stdin="through a link"))

# the same refusal, through other verbs, from both places
for place, where, claim in (("fake", fake_child, fake_node), ("victim", other, victim)):
    attempt(place + "_commit", lambda: fractal("commit", "planted", cwd=where, node=claim))
    attempt(place + "_wiki", lambda: fractal("wiki", "update", cwd=where, node=claim))
    attempt(place + "_pool", lambda: fractal("pool", "status", cwd=where, node=claim))
    attempt(place + "_post", lambda: fractal("radio", "post", "-", cwd=where, node=claim,
                                             stdin="posted from " + place))

# a plain directory of the worktree still works, as this node whatever _NODE says
os.makedirs(os.path.join(W, "sub"))
attempt("own_post", lambda: fractal("radio", "post", "-", cwd=os.path.join(W, "sub"),
                                    node=FACTS["parent_dir"], stdin="from my own node"))

# what the verb starts does not hold the launch's token
def lint_env():
    scripts = os.path.join(os.environ["NODE_DIR"], "scripts")
    os.makedirs(scripts, exist_ok=True)
    seen = os.path.join(os.environ["NODE_DIR"], "tmp", "lint-env.txt")
    with open(os.path.join(scripts, "lint.sh"), "w") as fh:
        fh.write("env | grep -c FRACTAL_RELAY > " + seen + "\\n"
                 "exit 0\\n")
    shutil.rmtree(fake, ignore_errors=True)
    shutil.rmtree(other, ignore_errors=True)
    os.unlink(os.path.join(W, "z"))
    with open("work.txt", "w") as fh:
        fh.write("work\\n")
    fractal("commit", "the agent's work")
    with open(seen) as fh:
        return fh.read().strip()
attempt("lint_env", lint_env)
"""


@pytest.fixture
def victim(tmp_path: Path, stub_tree_template: tuple[Path, Path]) -> Iterator[Tree]:
    """Another tree on the machine, with a non-root node ``main.v``."""
    template, agent = stub_tree_template
    shutil.copytree(template, tmp_path / "victim" / "repo", symlinks=True)
    t = Tree(repo=tmp_path / "victim" / "repo", agent=agent)
    t.cli("node", "init", "v", "--max-iters", "1")
    try:
        yield t
    finally:
        t.kill_sessions()


def test_a_relayed_verb_acts_only_in_its_own_tree_as_its_own_node(
        sandboxed_tree: Tree, victim: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    marker = tmp_path / "PWNED"
    facts = {"marker": str(marker), "victim_git": str(victim.repo / ".git"),
             "victim_node": str(victim.node_dir("v")), "parent_dir": str(tree.node_dir("a"))}
    report_path = hostile_node(tree, tmp_path, COMMANDS, facts)
    fake = Tree(repo=tree.worktree("a.b") / "x", agent=tree.agent)
    try:
        tree.cli("node", "start", "a.b")
        assert tree.wait_settled("a.b", timeout=300) == "completed"
        report = read_report(report_path)
    finally:
        if fake.db.exists():
            fake.kill_sessions()
    # the agent could make its tree (inside the sandbox, where it harms nothing) ...
    assert report["make_fake"] == {"ok": True, "detail": "made"}, report["make_fake"]
    # ... but nothing relayed acts there, nor in the other tree
    refused = ["fake_init", "fake_start", "victim_init", "victim_list", "victim_link",
               *(f"{place}_{verb}" for place in ("fake", "victim")
                 for verb in ("commit", "wiki", "pool", "post"))]
    for name in refused:
        assert report[name]["ok"] is False, (name, report[name])
        assert "is another repository inside your worktree" in str(
            report[name]["detail"]), (name, report[name])
    assert not marker.exists()  # no supervisor ran the agent's script outside
    assert victim.sql("SELECT node FROM nodes WHERE node LIKE '%pwned%'") == []
    assert victim.sql("SELECT sender FROM messages WHERE data LIKE 'posted from%' "
                      "OR data LIKE 'through a link%'") == []
    # every refusal is recorded against the asking node, in its own tree
    recorded = tree.sql("SELECT metadata FROM events WHERE node = 'main.a.b' "
                        "AND event = 'relay' AND status = 'failed'")
    assert len([row for row in recorded if "another repository" in str(row[0])]) == len(
        refused), recorded
    # a plain directory of the worktree works, as this node (the _NODE claim ignored)
    assert report["own_post"]["ok"] is True, report["own_post"]
    assert ("main.a.b", "from my own node") in tree.sql("SELECT sender, data FROM messages")
    # the commit's lint.sh (started by the relayed verb) saw no relay variable or token
    assert report["lint_env"] == {"ok": True, "detail": "0"}, report["lint_env"]
