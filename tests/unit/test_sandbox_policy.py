"""The sandbox's pure rules (``fractal.domain.sandbox``): the tree's setting, the launch
verdict, and what each path of a launch ends up as once every mount is laid."""

from __future__ import annotations

import pytest

from fractal.domain.sandbox import (
    RELAY_ENV,
    TOKEN_ENV,
    Mode,
    Mount,
    Op,
    SandboxPaths,
    Verdict,
    bwrap_args,
    decide,
    mode_of,
    no_new_reflogs,
    object_env,
    policy,
    private_objects,
)

REPO = "/src/repo"
GIT = f"{REPO}/.git"
WT = f"{REPO}/.worktrees/main.a.b"
NODE = f"{WT}/.fractal/main.a.b"
HOME = "/home/op"
TMUX = "/tmp/tmux-1000"
CHILD = SandboxPaths(
    repo=REPO, worktree=WT, node_dir=NODE, git_common=GIT,
    git_dir=f"{GIT}/worktrees/main.a.b", own_ref=f"{GIT}/refs/heads/main.a.b",
    branch_refs=(f"{GIT}/refs/heads/main", f"{GIT}/refs/heads/main.a",
                 f"{GIT}/refs/heads/main.a.b", f"{GIT}/refs/heads/main.a.c"),
    hide=(f"{REPO}/.fractal",), relay=f"{REPO}/.fractal/main/relay/main.a.b.sock", home=HOME,
    program_dir="/opt/agents/bin", tmux_dir=TMUX, tmux_socket=f"{TMUX}/default",
    claude_dir=f"{HOME}/.claude", claude_json=f"{HOME}/.claude.json", cache=f"{HOME}/.cache",
    logins=(f"{HOME}/.claude/.credentials.json", f"{HOME}/.codex/auth.json"))
ROOT = CHILD._replace(worktree=REPO, node_dir=f"{REPO}/.fractal/main", git_dir=GIT,
                      own_ref=f"{GIT}/refs/heads/main", relay=None)


def effective(mounts: list[Mount], path: str) -> str:
    """What ``path`` is inside: ``rw``, ``ro`` or ``hidden``; the last mount covering it
    decides, and the root is bound read-only."""
    mode = "ro"
    for mount in mounts:
        if path == mount.path or path.startswith(mount.path.rstrip("/") + "/"):
            mode = {Op.TMPFS: "hidden", Op.RW: "rw", Op.RW_TRY: "rw",
                    Op.NULL: "null"}.get(mount.op, "ro")
    return mode


def backing(mounts: list[Mount], path: str) -> str:
    """The outside path ``path`` inside reaches: the last mount covering it maps it from
    its source (an unmapped path is itself)."""
    found = path
    for mount in mounts:
        if path == mount.path or path.startswith(mount.path.rstrip("/") + "/"):
            found = (mount.source or mount.path) + path[len(mount.path):]
    return found


@pytest.mark.parametrize(("value", "expected"), [
    (None, Mode.AUTO), ("auto", Mode.AUTO), ("on", Mode.ON), ("off", Mode.OFF),
])
def test_the_trees_setting(value: str | None, expected: Mode) -> None:
    assert mode_of({} if value is None else {"sandbox": value}) is expected


@pytest.mark.parametrize("value", ["yes", "OFF", 0, False, ["off"]])
def test_a_bad_setting_is_a_problem_naming_the_fix(value: object) -> None:
    problem = mode_of({"sandbox": value})
    assert isinstance(problem, str) and not isinstance(problem, Mode)
    assert "not one of auto, on, off" in problem and "config.json" in problem


@pytest.mark.parametrize(("mode", "missing", "sandboxed", "refuses"), [
    (Mode.AUTO, "", True, False),
    (Mode.ON, "", True, False),
    (Mode.OFF, "", False, False),
    (Mode.OFF, "bwrap is not on PATH", False, False),
    (Mode.AUTO, "bwrap is not on PATH", False, True),
    (Mode.ON, "bwrap cannot make a sandbox here", False, True),
])
def test_the_launch_verdict(mode: Mode, missing: str, sandboxed: bool, refuses: bool) -> None:
    verdict = decide(mode, missing)
    assert verdict.sandboxed is sandboxed
    assert bool(verdict.refusal) is refuses
    if refuses:
        assert verdict.refusal.startswith(f"cannot sandbox the agent: {missing}")
        for fix in ("apt-get install bubblewrap", "unprivileged_userns_clone",
                    '"sandbox": "off"'):
            assert fix in verdict.refusal


def test_off_is_a_verdict_without_refusal() -> None:
    assert decide(Mode.OFF, "anything") == Verdict(False, "")


@pytest.mark.parametrize(("path", "mode"), [
    (f"{WT}/src/app.py", "rw"),  # the node's work
    (f"{NODE}/plans/next.md", "rw"),
    (f"{NODE}/memory/notes.md", "rw"),
    (f"{NODE}/tmp/scratch", "rw"),
    (f"{NODE}/.codex/sessions/x", "rw"),
    (f"{NODE}/config.json", "ro"),  # its limits and gates
    (f"{NODE}/command.err", "ro"),  # what the supervisor writes: no symlink swapped in
    (f"{NODE}/setup.log", "ro"),
    (f"{NODE}/supervisor.log", "ro"),
    (f"{NODE}/pane.log", "ro"),
    (f"{NODE}/.session", "ro"),
    (f"{NODE}/NODE.md", "ro"),
    (f"{NODE}/scripts/lint.sh", "rw"),  # its own hooks: they run only in its sandbox
    (f"{NODE}/tmp/err/command.err", "ro"),
    (f"{NODE}/tmp/checks/1-1.log", "ro"),
    (f"{NODE}/tmp/bin/fractal", "ro"),
    (f"{WT}/.fractal/main.a/config.json", "ro"),  # the parent's node dir, as committed
    (f"{WT}/.fractal/elsewhere", "ro"),  # no node dir rebuilt beside it
    (f"{NODE}/steps/01-PLAN.md", "ro"),
    (f"{WT}/.git", "ro"),  # names the git dir git reads
    (f"{GIT}/objects/ab/cdef", "ro"),  # the shared store: every branch's history
    (f"{GIT}/objects/pack/pack-1.pack", "ro"),
    (f"{GIT}/objects/info/alternates", "ro"),
    (f"{GIT}/worktrees/main.a.b/objects/ab/cdef", "rw"),  # what its commits write
    (f"{GIT}/worktrees/main.a.b/objects/pack/pack-1.pack", "rw"),
    (f"{GIT}/worktrees/main.a.c/objects/ab/cdef", "ro"),  # a sibling's private objects
    (f"{GIT}/refs/heads/main.a.b", "rw"),
    (f"{GIT}/refs/heads/main.a.b.lock", "rw"),
    (f"{GIT}/refs/heads/new-branch", "rw"),
    (f"{GIT}/logs/refs/heads/main.a.b", "rw"),
    (f"{GIT}/worktrees/main.a.b/index", "rw"),
    (f"{GIT}/worktrees/main.a.b/HEAD", "rw"),
    (f"{GIT}/worktrees/main.a.b/commondir", "ro"),
    (f"{GIT}/worktrees/main.a.b/gitdir", "ro"),
    (f"{GIT}/worktrees/main.a.b/config.worktree", "ro"),
    (f"{GIT}/refs/heads/main.a", "ro"),  # other branches are pinned
    (f"{GIT}/refs/heads/main", "ro"),
    (f"{GIT}/refs/heads/main.a.c", "ro"),
    (f"{GIT}/config", "ro"),  # never writable
    (f"{GIT}/hooks/pre-commit", "ro"),
    (f"{GIT}/packed-refs", "ro"),
    (f"{GIT}/worktrees/main.a.c/index", "ro"),
    (f"{REPO}/README.md", "ro"),  # the main checkout
    (f"{REPO}/.worktrees/main.a.c/x.py", "ro"),  # a sibling
    (f"{REPO}/.worktrees/main.a/.fractal/main.a/steps/01.md", "ro"),  # the parent
    (f"{REPO}/.fractal/main/fractal.db", "hidden"),  # the ledger
    (f"{REPO}/.fractal/main/.paused", "hidden"),
    (f"{REPO}/.fractal/main/relay/main.a.sock", "hidden"),  # another node's relay
    (f"{REPO}/.fractal/main/relay/main.a.b.sock", "rw"),  # its own
    (f"{TMUX}/default", "hidden"),  # fractal's tmux server
    (f"{HOME}/.claude/projects/x.jsonl", "rw"),  # the node's own Claude home stands in
    (f"{HOME}/.claude.json", "rw"),  # the node's fresh copy
    (f"{HOME}/.claude/.credentials.json", "rw"),  # the user's one login: a refresh rewrites it
    (f"{HOME}/.codex/auth.json", "rw"),
    (f"{HOME}/.codex/sessions/x.jsonl", "ro"),  # the user's Codex home
    (f"{HOME}/.codex/config.toml.new", "ro"),
    (f"{HOME}/.claude/agents/planted.md", "ro"),  # the user's own, shared by every node
    (f"{HOME}/.claude/commands/x.md", "ro"),
    (f"{HOME}/.claude/skills/x/SKILL.md", "ro"),
    (f"{HOME}/.cache/pip/wheel.whl", "rw"),  # the node's own cache stands in
    (f"{HOME}/.config/claude/x", "ro"),
    (f"{GIT}/logs/refs/heads/main", "ro"),  # other branches' reflogs
    (f"{GIT}/logs/refs/heads/main.a.c", "ro"),
    (f"{GIT}/logs/refs/heads/new-branch", "ro"),  # git inside makes none (no_new_reflogs)
    (f"{GIT}/logs/HEAD", "ro"),  # the main checkout's HEAD reflog
    (f"{HOME}/.claude/settings.json", "ro"),
    (f"{HOME}/.codex/config.toml", "ro"),
    (f"{HOME}/.claude/CLAUDE.md", "ro"),  # standing instructions of every later agent
    (f"{HOME}/.codex/AGENTS.md", "ro"),
    (f"{HOME}/.ssh/id_ed25519", "ro"),
    ("/opt/agents/bin/agent", "ro"),
])
def test_what_a_childs_launch_may_do_with_each_path(path: str, mode: str) -> None:
    assert effective(policy(CHILD), path) == mode


@pytest.mark.parametrize(("path", "mode"), [
    (f"{REPO}/.fractal/main/plans/x.md", "rw"),
    (f"{REPO}/.fractal/main/.codex/auth.json", "rw"),
    (f"{REPO}/.fractal/main/config.json", "ro"),  # its node dir is the tree's data dir
    (f"{REPO}/.fractal/main/scripts/setup.sh", "hidden"),
    (f"{REPO}/.fractal/main/fractal.db", "hidden"),
    (f"{REPO}/README.md", "ro"),
    (f"{GIT}/config", "ro"),
    (f"{GIT}/index", "ro"),  # the main checkout's index: no commit from inside
    (f"{GIT}/objects/ab/cdef", "ro"),  # the shared store
    (f"{REPO}/.fractal/main/tmp/objects/ab/cdef", "rw"),  # the root's private objects
    (f"{GIT}/worktrees/main.a.b/objects/ab/cdef", "ro"),  # a child's
    (f"{GIT}/logs/HEAD", "rw"),  # its own HEAD reflog
    (f"{GIT}/logs/refs/heads/main", "rw"),
    (f"{GIT}/logs/refs/heads/main.a", "ro"),
])
def test_the_root_nodes_launch(path: str, mode: str) -> None:
    assert effective(policy(ROOT), path) == mode


@pytest.mark.parametrize(("path", "outside"), [
    (f"{HOME}/.claude/projects/-x/s.jsonl", f"{NODE}/.claude/home/projects/-x/s.jsonl"),
    (f"{HOME}/.claude/agents/x.md", f"{HOME}/.claude/agents/x.md"),  # the user's, read-only
    (f"{HOME}/.claude/settings.json", f"{HOME}/.claude/settings.json"),
    (f"{HOME}/.claude/settings.local.json", f"{NODE}/.claude/home/settings.local.json"),
    (f"{HOME}/.claude/.credentials.json", f"{HOME}/.claude/.credentials.json"),
    (f"{HOME}/.claude.json", f"{NODE}/.claude/home/.claude.json"),
    (f"{HOME}/.cache/x", f"{NODE}/tmp/cache/x"),
])
def test_the_agent_homes_inside_are_the_nodes_own(path: str, outside: str) -> None:
    assert backing(policy(CHILD), path) == outside


def test_homes_the_user_lacks_are_not_bound() -> None:
    bare = CHILD._replace(claude_dir=None, claude_json=None, cache=None, logins=())
    paths = {m.path for m in policy(bare)}
    assert not paths & {f"{HOME}/.claude", f"{HOME}/.claude.json", f"{HOME}/.cache"}
    assert effective(policy(bare), f"{HOME}/.claude/projects/x") == "ro"


def test_a_mount_with_a_source_binds_it_at_the_path() -> None:
    args = bwrap_args([Mount(Op.RW, f"{HOME}/.cache", f"{NODE}/tmp/cache")], relay=None,
                      chdir=WT)
    assert args[args.index("--bind"):args.index("--bind") + 3] == [
        "--bind", f"{NODE}/tmp/cache", f"{HOME}/.cache"]


def test_the_bwrap_options() -> None:
    args = bwrap_args(policy(CHILD), relay=CHILD.relay, chdir=WT)
    assert args[:4] == ["--ro-bind", "/", "/", "--dev"]
    assert args[-2:] == ["--chdir", WT]
    for option in ("--unshare-pid", "--die-with-parent"):
        assert option in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert args[args.index("--setenv") + 1:args.index("--setenv") + 3] == [RELAY_ENV,
                                                                           CHILD.relay]
    assert "--unshare-net" not in args and "--unshare-all" not in args  # agents call APIs
    assert args.index("--tmpfs") < args.index(WT)  # /tmp is hidden before the binds


def test_no_relay_no_variable() -> None:
    assert "--setenv" not in bwrap_args(policy(ROOT), relay=None, chdir=REPO)


@pytest.mark.parametrize(("token", "expected"), [
    (None, None),  # no relay token: no variable
    ("", None),
    ("f00d" * 16, "f00d" * 16),  # the launch's token, set inside only
])
def test_the_relay_token_variable(token: str | None, expected: str | None) -> None:
    args = bwrap_args(policy(CHILD), relay=CHILD.relay, chdir=WT, token=token)
    pairs = {args[i + 1]: args[i + 2] for i, a in enumerate(args) if a == "--setenv"}
    assert pairs.get(TOKEN_ENV) == expected
    assert pairs[RELAY_ENV] == CHILD.relay


@pytest.mark.parametrize(("program", "path", "mode"), [
    # an agent kept in the tree's data dir (the demo's) runs: itself alone comes back
    (f"{REPO}/.fractal/main/demo-agent", f"{REPO}/.fractal/main/demo-agent", "ro"),
    (f"{REPO}/.fractal/main/demo-agent", f"{REPO}/.fractal/main/fractal.db", "hidden"),
    (f"{REPO}/.fractal/main/demo-agent", f"{REPO}/.fractal/main/config.json", "hidden"),
    # a program elsewhere changes nothing in the data dir
    ("/opt/agents/bin/agent", f"{REPO}/.fractal/main/demo-agent", "hidden"),
])
def test_a_program_in_a_hidden_dir_is_bound_alone(program: str, path: str, mode: str) -> None:
    mounts = policy(CHILD._replace(program=program, program_dir=program.rsplit("/", 1)[0]))
    assert effective(mounts, path) == mode


def test_a_childs_node_dir_is_pinned_and_its_work_dirs_reopened() -> None:
    """The worktree's ``.fractal`` and the node dir are mount points laid after the
    writable worktree (a mount point cannot be renamed away), and each work dir and
    each supervisor dir in ``tmp`` is one too, in that order."""
    mounts = policy(CHILD)
    at = {m.path: i for i, m in enumerate(mounts)}
    assert mounts[at[f"{WT}/.fractal"]].op is Op.RO and mounts[at[NODE]].op is Op.RO
    assert at[WT] < at[f"{WT}/.fractal"] < at[NODE] < at[f"{NODE}/tmp"] < at[f"{NODE}/tmp/err"]
    for name in ("plans", "memory", "tmp", ".claude", ".codex"):
        assert mounts[at[f"{NODE}/{name}"]].op is Op.RW_TRY
    for name in ("err", "checks", "bin"):
        assert mounts[at[f"{NODE}/tmp/{name}"]].op is Op.RO_TRY


HEADS = f"{GIT}/refs/heads"
SLASHED = CHILD._replace(own_ref=f"{HEADS}/feature/x", branch_refs=(
    f"{HEADS}/main", f"{HEADS}/feature/x", f"{HEADS}/feature/y", f"{HEADS}/team/a/one",
    f"{HEADS}/solo/mine"))


@pytest.mark.parametrize(("path", "mode", "pinned"), [
    (f"{HEADS}/feature", "rw", True),  # holds its own ref and another's: writable, pinned
    (f"{HEADS}/feature/x", "rw", False),
    (f"{HEADS}/feature/y", "ro", False),  # the other ref itself is pinned by its file
    (f"{HEADS}/team", "ro", True),  # holds only others' refs: read-only, pinned
    (f"{HEADS}/team/a", "ro", True),
    (f"{HEADS}/solo", "ro", True),
    (f"{HEADS}/new-branch", "rw", False),  # refs/heads itself stays writable
])
def test_ref_dirs_holding_another_branchs_ref_are_pinned(path: str, mode: str,
                                                         pinned: bool) -> None:
    mounts = policy(SLASHED)
    assert effective(mounts, path) == mode
    dirs = [m for m in mounts if m.path == path and m.path.rsplit("/", 1)[-1] in
            ("feature", "team", "a", "solo")]
    assert bool(dirs) is pinned


def test_a_ref_dir_is_pinned_before_the_ref_files_in_it() -> None:
    paths = [m.path for m in policy(SLASHED)]
    assert paths.index(f"{HEADS}/team") < paths.index(f"{HEADS}/team/a")
    assert paths.index(f"{HEADS}/team/a") < paths.index(f"{HEADS}/team/a/one")
    assert paths.index(f"{HEADS}/feature") < paths.index(f"{HEADS}/feature/y")


SHARED = "/tmp/x"  # FRACTAL_TMUX_SOCKET=/tmp/x/tmux.sock with the project under /tmp/x
BESIDE = CHILD._replace(
    repo=f"{SHARED}/repo", worktree=f"{SHARED}/repo/.worktrees/main.a.b",
    node_dir=f"{SHARED}/repo/.worktrees/main.a.b/.fractal/main.a.b",
    git_common=f"{SHARED}/repo/.git", git_dir=f"{SHARED}/repo/.git/worktrees/main.a.b",
    own_ref=f"{SHARED}/repo/.git/refs/heads/main.a.b", branch_refs=(),
    hide=(f"{SHARED}/repo/.fractal",), relay=None, program_dir=SHARED,
    program=f"{SHARED}/agent.sh", tmux_dir=SHARED, tmux_socket=f"{SHARED}/tmux.sock")


@pytest.mark.parametrize(("paths", "path", "mode"), [
    # the socket dir holds nothing the launch needs: the whole dir is hidden
    (CHILD, f"{TMUX}/default", "hidden"),
    (CHILD, f"{TMUX}/other-server", "hidden"),
    # it holds the project and the agent: only the socket is covered, the rest is seen
    (BESIDE, f"{SHARED}/tmux.sock", "null"),
    (BESIDE, f"{SHARED}/agent.sh", "ro"),
    (BESIDE, f"{SHARED}/repo/README.md", "ro"),
    (BESIDE, f"{SHARED}/repo/.worktrees/main.a.b/src/app.py", "rw"),
    (BESIDE._replace(program_dir="/opt/bin", program="/opt/bin/agent"),
     f"{SHARED}/tmux.sock", "null"),  # the repository alone is enough
    (BESIDE._replace(tmux_socket=None), f"{SHARED}/tmux.sock", "ro"),  # no socket yet
])
def test_the_tmux_socket_is_hidden_without_hiding_the_project(
        paths: SandboxPaths, path: str, mode: str) -> None:
    assert effective(policy(paths), path) == mode


def test_the_socket_is_covered_by_dev_null_last() -> None:
    args = bwrap_args(policy(BESIDE), relay=None, chdir=BESIDE.worktree)
    at = args.index(f"{SHARED}/tmux.sock")
    assert args[at - 2:at + 1] == ["--ro-bind", "/dev/null", f"{SHARED}/tmux.sock"]
    assert args[at + 1] == "--unshare-pid"  # after every other mount
    assert SHARED not in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]


@pytest.mark.parametrize(("paths", "private"), [
    (CHILD, f"{GIT}/worktrees/main.a.b/objects"),  # inside its worktree's own git dir
    (ROOT, f"{REPO}/.fractal/main/tmp/objects"),  # its git dir is the shared .git
])
def test_each_nodes_private_object_directory(paths: SandboxPaths, private: str) -> None:
    assert private_objects(paths.git_common, paths.git_dir, paths.node_dir) == private
    assert dict(object_env(paths)) == {"GIT_OBJECT_DIRECTORY": private,
                                       "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{GIT}/objects"}
    # a mount point of its own: it cannot be swapped for a link while the launch lives
    assert Mount(Op.RW, private) in policy(paths)


def test_the_object_variables_are_set_on_bwraps_command_line() -> None:
    args = bwrap_args(policy(CHILD), relay=CHILD.relay, chdir=WT, setenv=object_env(CHILD))
    pairs = {args[i + 1]: args[i + 2] for i, a in enumerate(args) if a == "--setenv"}
    assert pairs["GIT_OBJECT_DIRECTORY"] == f"{GIT}/worktrees/main.a.b/objects"
    assert pairs["GIT_ALTERNATE_OBJECT_DIRECTORIES"] == f"{GIT}/objects"


@pytest.mark.parametrize(("env", "expected"), [
    ({}, {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.logAllRefUpdates",
          "GIT_CONFIG_VALUE_0": "false"}),
    ({"GIT_CONFIG_COUNT": "2"}, {"GIT_CONFIG_COUNT": "3",  # after the caller's own entries
                                 "GIT_CONFIG_KEY_2": "core.logAllRefUpdates",
                                 "GIT_CONFIG_VALUE_2": "false"}),
    ({"GIT_CONFIG_COUNT": "x"}, {"GIT_CONFIG_COUNT": "1",
                                 "GIT_CONFIG_KEY_0": "core.logAllRefUpdates",
                                 "GIT_CONFIG_VALUE_0": "false"}),
])
def test_no_new_reflogs(env: dict[str, str], expected: dict[str, str]) -> None:
    assert no_new_reflogs(env) == expected


def test_setenv_variables_are_set_inside() -> None:
    args = bwrap_args([], relay=None, chdir=WT, setenv={"GIT_CONFIG_COUNT": "1"})
    at = args.index("--setenv")
    assert args[at:at + 3] == ["--setenv", "GIT_CONFIG_COUNT", "1"]
