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

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import git, wait_until
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



CRASH = """
import zlib
def git(*args):
    done = subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=a@example.com",
                           *args], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()

if not os.path.exists(FACTS["marker"]):  # the first launch: commit, then hang
    with open("crash.txt", "w") as fh:
        fh.write("committed just before the supervisor died\\n")
    git("add", "crash.txt")
    git("commit", "-q", "-m", "agent commit before the crash", "--no-verify")
    if FACTS["forge"]:  # the new blob's file in the private dir rewritten: no longer its hash
        blob = git("rev-parse", "HEAD:crash.txt")
        path = os.path.join(os.environ["GIT_OBJECT_DIRECTORY"], blob[:2], blob[2:])
        os.chmod(path, 0o644)
        with open(path, "wb") as fh:
            fh.write(zlib.compress(b"blob 6\\0forged"))
    with open(FACTS["marker"] + ".tmp", "w") as fh:
        fh.write(git("rev-parse", "HEAD"))
    os.rename(FACTS["marker"] + ".tmp", FACTS["marker"])
    time.sleep(3600)
"""
"""A hostile agent's first launch commits (its objects in the private dir alone), forges
the new blob's file when told, and hangs to be killed; a later launch does nothing."""


def _crash_mid_launch(tree: Tree, tmp_path: Path, forge: bool) -> tuple[str, Path]:
    """Start main.a.b, let its agent commit, then SIGKILL its supervisor and its launch's
    process group, and let a read heal it (parked). Returns (the agent's commit, the
    private object dir that holds it)."""
    marker = tree.node_dir("a.b") / "tmp" / "committed"
    hostile_node(tree, tmp_path, CRASH, {"marker": str(marker), "forge": forge})
    tree.cli("node", "start", "a.b")
    _step, pgid = tree.wait_running("a.b", timeout=120)
    wait_until(marker.exists, timeout=120, message="the agent's commit")
    sha = marker.read_text().strip()
    private = tree.gitdir("a.b") / "objects"
    assert (private / sha[:2] / sha[2:]).is_file()
    assert _rc(tree.repo, "cat-file", "-e", sha).returncode != 0  # not in the shared store
    supervisor = tree.supervisor("a.b")
    supervisor.send_signal(signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    supervisor.wait(timeout=30)
    tree.cli("node", "list")  # the read that heals: parked
    assert tree.status("a.b") == "paused"
    assert (private / sha[:2] / sha[2:]).is_file()  # nobody adopted it yet
    return sha, private


def _whole(repo: Path, rev: str) -> bool:
    return subprocess.run(["git", "rev-list", "--objects", "--quiet", rev], cwd=repo,
                          env={**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""},
                          capture_output=True, check=False).returncode == 0


def test_what_a_crash_mid_launch_left_is_adopted_at_the_next_start(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    sha, private = _crash_mid_launch(tree, tmp_path, forge=False)
    tree.cli("node", "resume", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed", tree.cli(
        "node", "status", "a.b").stdout
    assert list(private.iterdir()) == []
    assert _whole(tree.repo, "main.a.b")
    assert sha in git(tree.repo, "log", "--format=%H", "main.a.b").split()
    tree.cli("node", "merge", "a.b", cwd=tree.worktree("a"))
    assert _rc(tree.repo, "cat-file", "-e", "main.a:crash.txt").returncode == 0
    fsck = _rc(tree.repo, "fsck", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_a_crashed_node_needing_a_forged_object_is_never_merged(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    sha, private = _crash_mid_launch(tree, tmp_path, forge=True)
    blob = subprocess.run(["git", "rev-parse", f"{sha}:crash.txt"], cwd=tree.repo,
                          env={**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(private)},
                          capture_output=True, text=True, check=True).stdout.strip()
    tree.cli("node", "kill", "a.b")  # settled: a parked node is no merge's child
    assert tree.status("a.b") == "killed"
    before = git(tree.repo, "rev-parse", "main.a")
    refused = tree.cli("node", "merge", "a.b", cwd=tree.worktree("a"), check=False)
    assert refused.returncode != 0
    said = " ".join(refused.stderr.split())
    assert "main.a.b's branch needs git objects its agent wrote that adoption refused" \
        in said, said
    assert blob[2:] in said and "nothing was written for the merge" in said, said
    assert "fractal node start main.a.b --continue" in said, said
    assert git(tree.repo, "rev-parse", "main.a") == before
    assert not (tree.repo / ".git" / "objects" / blob[:2] / blob[2:]).exists()
    # what the refusal says to do: the next start adopts, refuses the blob, sets the
    # branch back and the run's backstop commits the files again, whole
    tree.cli("node", "start", "a.b", "--continue")
    assert tree.wait_settled("a.b", timeout=300) == "completed", tree.cli(
        "node", "status", "a.b").stdout
    recorded = [str(m) for (m,) in tree.sql(
        "SELECT metadata FROM events WHERE node = 'main.a.b' AND event = 'objects_refused'")]
    assert any(blob[2:] in m and "set back to" in m for m in recorded), recorded
    assert _whole(tree.repo, "main.a.b")
    tree.cli("node", "merge", "a.b", cwd=tree.worktree("a"))
    assert git(tree.repo, "show", "main.a:crash.txt") == \
        "committed just before the supervisor died"
    assert _whole(tree.repo, "main.a")
    # the branch's reflog still names the refused commit; every ref itself is whole
    fsck = _rc(tree.repo, "fsck", "--no-dangling", "--no-reflogs")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
