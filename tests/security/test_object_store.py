"""A sandboxed agent cannot delete or rewrite the tree's git history: the shared
``.git/objects`` is read-only inside, so removing a loose object another branch needs,
overwriting a pack or planting a file there all fail, and ``git fsck`` stays clean with
every branch readable. Its own commits still land: git inside writes into the node's
private object directory, which the supervisor adopts into the shared store, each object
checked (a relayed ``fractal commit`` adopts first, a ``git gc`` inside packs privately).
A loose object whose bytes do not hash to its name is refused at adoption and recorded
(``objects_refused``), and never enters the shared store. On the code before, the
attacks on the store succeeded and the history broke."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
import zlib
def git(*args):
    done = subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=a@example.com",
                           *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()

def fractal(*args):
    done = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout

def write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)
    return path

attempt("delete_loose", lambda: os.unlink(FACTS["loose"]))
attempt("chmod_loose", lambda: os.chmod(FACTS["loose"], 0o644))
attempt("overwrite_pack", lambda: write(FACTS["pack"], b"garbage"))
attempt("delete_pack", lambda: os.unlink(FACTS["pack"]))
attempt("plant", lambda: write(os.path.join(FACTS["objects"], "info", "alternates"),
                               b"/tmp\\n"))
attempt("unset_vars", lambda: subprocess.run(
    ["git", "hash-object", "-w", "--stdin"], input=b"escape", capture_output=True,
    env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    check=True).stdout)
def commit():
    with open("agent.txt", "w") as fh:
        fh.write("the agent's own commit\\n")
    git("add", "agent.txt")
    git("commit", "-q", "-m", "agent commit", "--no-verify")
    git("repack", "-d", "-q")  # packed into the private object dir
    return git("rev-parse", "HEAD")
attempt("commit", commit)
def maintained():
    with open("more.txt", "w") as fh:
        fh.write("a commit that sets off git's own maintenance\\n")
    git("add", "more.txt")
    git("-c", "gc.auto=1", "-c", "gc.autoDetach=false", "commit", "-q", "-m",
        "maintained commit", "--no-verify")
attempt("maintained", maintained)
def relayed():
    with open("relayed.txt", "w") as fh:
        fh.write("through fractal commit\\n")
    return fractal("commit", "relayed commit")
attempt("relayed", relayed)
def forge():
    private = os.environ["GIT_OBJECT_DIRECTORY"]
    name = FACTS["forged"]
    os.makedirs(os.path.join(private, name[:2]), exist_ok=True)
    return write(os.path.join(private, name[:2], name[2:]),
                 zlib.compress(b"blob 6\\0forged"))
attempt("forge", forge)
"""


def _rc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def test_a_sandboxed_agent_cannot_break_the_shared_history(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    objects = tree.repo / ".git" / "objects"
    forged = "ab" * 20
    report_path = hostile_node(tree, tmp_path, ATTACKS, {})
    git(tree.repo, "repack", "-a", "-d", "-q")  # every object so far in one pack
    (pack,) = sorted((objects / "pack").glob("pack-*.pack"))
    (tree.worktree("a.c") / "sibling.txt").write_text("a sibling's commit\n")
    git(tree.worktree("a.c"), "add", "-A")
    git(tree.worktree("a.c"), "commit", "-q", "-m", "sibling work", "--no-verify")
    sibling = git(tree.repo, "rev-parse", "main.a.c")
    loose = objects / sibling[:2] / sibling[2:]
    assert loose.is_file()
    _facts(tmp_path, {"loose": str(loose), "pack": str(pack), "objects": str(objects),
                      "forged": forged})
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed", tree.cli(
        "node", "status", "a.b").stdout
    report = read_report(report_path)
    for attack in ("delete_loose", "chmod_loose", "overwrite_pack", "delete_pack", "plant",
                   "unset_vars"):
        assert report[attack]["ok"] is False, (attack, report[attack])
    assert loose.is_file() and pack.is_file()
    fsck = _rc(tree.repo, "fsck", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    for branch in ("main", "main.a", "main.a.c", "main.a.b"):
        assert _rc(tree.repo, "rev-list", "--objects", "--quiet", branch).returncode == 0
    # the agent's own commits landed on its branch, from the shared store alone
    assert report["commit"]["ok"] is True, report["commit"]
    assert report["relayed"]["ok"] is True, report["relayed"]
    assert report["maintained"]["ok"] is True, report["maintained"]
    log = git(tree.repo, "log", "--format=%s", "main.a.b")
    assert {"agent commit", "maintained commit"} <= set(log.splitlines()), log
    assert "(relayed commit)" in log, log
    assert _rc(tree.repo, "cat-file", "-e", str(report["commit"]["detail"])).returncode == 0
    private = tree.repo / ".git" / "worktrees"
    assert [p for p in private.glob("*/objects/*")] == []
    # the forged object was refused, recorded, and never entered the shared store
    assert report["forge"]["ok"] is True, report["forge"]
    assert not (objects / forged[:2] / forged[2:]).exists()
    refused = [str(m) for (m,) in tree.sql(
        "SELECT metadata FROM events WHERE node = 'main.a.b' AND event = 'objects_refused'")]
    assert any(forged[2:] in m and "does not hash to its name" in m for m in refused), refused
    # and the work merges up as before
    tree.cli("node", "merge", "a.b", cwd=tree.worktree("a"))
    for name in ("agent.txt", "relayed.txt", "more.txt"):
        assert _rc(tree.repo, "cat-file", "-e", f"main.a:{name}").returncode == 0, name
    assert _rc(tree.repo, "fsck", "--no-dangling").returncode == 0


def _facts(tmp_path: Path, facts: dict[str, str]) -> None:
    """Rewrite the hostile agent's FACTS (they name objects made after it was written)."""
    import json

    agent = tmp_path / "hostile-agent"
    text = agent.read_text()
    start = text.index("FACTS = json.loads(")
    end = text.index("\n", start)
    agent.write_text(text[:start] + f"FACTS = json.loads({json.dumps(json.dumps(facts))})"
                     + text[end:])

