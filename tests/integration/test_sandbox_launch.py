"""A program started in a node's sandbox (``procs.confine.confined_argv`` and the process
plumbing): it exits with its own code, a soft interrupt to its group reaches it (bubblewrap
does not die of it first), an ignored TERM still ends at KILL, what it leaves running ends
with it, and it commits in its worktree (into its private object dir, adopted after)
while the repository's config and shared objects stay read-only."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import psutil
import pytest

from fractal.procs import processes
from fractal.procs.confine import confined_argv
from fractal.procs.sandbox import missing
from fractal.tree import NodePaths, Tree
from fractal.workspace.adoption import adopt
from tests.helpers import git, make_repo, wait_until

pytestmark = pytest.mark.skipif(bool(missing()), reason="no bubblewrap sandbox here")


@pytest.fixture
def node(tmp_path: Path) -> NodePaths:
    repo = make_repo(tmp_path / "repo")
    git(repo, "worktree", "add", "-q", "-b", "main.a", str(repo / ".worktrees" / "main.a"))
    paths = Tree(repo=repo, root="main").node("main.a")
    paths.steps_dir.mkdir(parents=True)
    paths.config_path.write_text("{}\n")
    return paths


def _run(node: NodePaths, script: str, **stop: object) -> tuple[int | None, bytes]:
    argv = confined_argv(node, os.environ, ["sh", "-c", script], node.worktree, relay=None)
    launched = processes.spawn_group(argv, cwd=node.worktree, env=dict(os.environ))
    assert launched.popen.stdout is not None
    if stop:
        assert launched.popen.stdout.readline() == b"ready\n"
        processes.kill_group(launched.handle, **stop)  # type: ignore[arg-type]
    out = launched.popen.stdout.read()
    return launched.popen.wait(), out


def test_its_own_exit_code(node: NodePaths) -> None:
    assert _run(node, "exit 7") == (7, b"")


def test_a_soft_interrupt_reaches_the_program(node: NodePaths) -> None:
    code, out = _run(node, 'trap "echo flushed; exit 0" INT; echo ready; sleep 30 & wait',
                     grace=5.0, soft_signal=signal.SIGINT, soft_grace=5.0)
    assert (code, out) == (0, b"flushed\n")


def test_an_ignored_term_ends_at_kill(node: NodePaths) -> None:
    code, _ = _run(node, 'trap "" INT TERM; echo ready; sleep 30', grace=0.5)
    assert code == -signal.SIGKILL


def test_nothing_it_starts_outlives_it(node: NodePaths) -> None:
    token = f"left-behind-{uuid.uuid4().hex}"
    code, _ = _run(node, f"setsid sh -c 'sleep 300; echo {token}' >/dev/null 2>&1 & exit 0")
    assert code == 0

    def left() -> list[int]:
        return [p.pid for p in psutil.process_iter(["cmdline", "status"])
                if p.info.get("status") != psutil.STATUS_ZOMBIE
                and any(token in part for part in p.info.get("cmdline") or [])]

    # the namespace's end is the kernel's: allow it the moment it takes to finish
    assert wait_until(lambda: left() == [], timeout=2, message=f"left: {left()}")


def test_it_commits_in_its_worktree_but_not_the_config(node: NodePaths) -> None:
    config = node.tree.repo / ".git" / "config"
    before = config.read_text()
    code, out = _run(node, "echo work > work.txt && git add work.txt && "
                           "git -c user.name=a -c user.email=a@b commit -qm work && "
                           "echo done; git config core.fsmonitor owned || echo refused")
    assert (code, out) == (0, b"done\nrefused\n")
    # its objects went to its private dir; the supervisor adopts them after a launch
    common = node.tree.repo / ".git"
    private = common / "worktrees" / "main.a" / "objects"
    assert adopt(private, common, drain=True).adopted == 3
    assert git(node.worktree, "log", "-1", "--format=%s") == "work"
    assert config.read_text() == before


def test_the_shared_objects_are_read_only_inside(node: NodePaths) -> None:
    objects = node.tree.repo / ".git" / "objects"
    before = sorted(objects.rglob("*"))
    code, out = _run(node, "env -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES"
                           " git hash-object -w --stdin </dev/null || echo refused; "
                           "rm -rf " + str(objects) + "/pack 2>/dev/null || echo kept")
    assert (code, out) == (0, b"refused\nkept\n")
    assert sorted(objects.rglob("*")) == before


def test_the_root_nodes_git_writes_its_own_private_objects(node: NodePaths) -> None:
    """The root node (its worktree the main checkout) gets the same rule: new objects go
    to ``tmp/objects`` in its node dir, the shared store stays read-only, and adoption
    takes them in."""
    root = node.tree.node("main")
    root.node_dir.mkdir(parents=True, exist_ok=True)
    (root.node_dir / "steps").mkdir(exist_ok=True)
    argv = confined_argv(root, os.environ, ["sh", "-c", "echo root work | git hash-object "
                                            "-w --stdin; echo $GIT_OBJECT_DIRECTORY"],
                         root.worktree, relay=None)
    launched = processes.spawn_group(argv, cwd=root.worktree, env=dict(os.environ))
    out, _ = launched.popen.communicate(timeout=30)
    sha, private = out.decode().split()
    assert private == str(root.node_dir / "tmp" / "objects")
    common = node.tree.repo / ".git"
    assert not (common / "objects" / sha[:2] / sha[2:]).exists()
    assert (Path(private) / sha[:2] / sha[2:]).is_file()
    assert adopt(Path(private), common, drain=True) == (1, ())
    assert git(node.tree.repo, "cat-file", "blob", sha) == "root work"
