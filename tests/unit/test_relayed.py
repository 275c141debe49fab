"""What a node's relay runs for its agent (``fractal.domain.relayed``): the verb
allowlist, where the paths of an argv stand, which sent directory lies in another
repository, and the verb's environment."""

from __future__ import annotations

from pathlib import PurePath

import pytest

from fractal.domain.relayed import (
    PathValue,
    foreign_repository,
    path_values,
    verb_env,
    verb_refusal,
)

ALLOWED = [
    [],
    ["--help"],
    ["--version"],
    ["commit", "the message"],
    ["node"],
    ["node", "--help"],
    ["node", "init", "kid", "--task-file", "t.md"],
    ["node", "status"],
    ["node", "config", "set", "max_iters", "2"],
    ["node", "cost", "spent"],
    ["radio", "send", "main.a", "hello"],
    ["pool", "status"],
    ["plan", "init", "p"],
    ["wiki", "update"],
    ["wiki", "update", "--path", "."],
    ["usage", "reopen", "claude"],
    ["pause"],  # the tree-wide verbs: their own authority check refuses a node
    ["destroy", "--force"],
    ["inbox", "notify", "x"],
]
REFUSED = [
    (["node", "_run", "--path", "/elsewhere"], "`fractal node _run` is not a verb"),
    (["node", "attach", "b"], "`fractal node attach` is not a verb"),
    (["_notify", "--path", "."], "`fractal _notify` is not a verb"),
    (["init"], "`fractal init` is not a verb"),
    (["open"], "`fractal open` is not a verb"),
    (["doctor"], "`fractal doctor` is not a verb"),
    (["db", "copy-to", "x"], "`fractal db` is not a verb"),
    (["rescue", "restore", "x"], "`fractal rescue` is not a verb"),
    (["demo", "/elsewhere"], "`fractal demo` is not a verb"),
    (["inbox", "list"], "`fractal inbox list` is not a verb"),
    (["radio", "_x"], "`fractal radio _x` is not a verb"),
    (["wiki", "update", "/elsewhere"], "takes no directory through the relay"),
]


@pytest.mark.parametrize("argv", ALLOWED)
def test_a_protocol_verb_is_relayed(argv: list[str]) -> None:
    assert verb_refusal(argv) is None


@pytest.mark.parametrize(("argv", "why"), REFUSED)
def test_any_other_verb_is_refused_saying_why(argv: list[str], why: str) -> None:
    refusal = verb_refusal(argv)
    assert refusal is not None and why in refusal


@pytest.mark.parametrize(("argv", "found"), [
    (["node", "status"], []),
    (["node", "init", "k", "--task-file", "t.md"], [PathValue(4, "--task-file", "t.md", False)]),
    (["node", "init", "k", "--task-file=/proc/1/environ"],
     [PathValue(3, "--task-file", "/proc/1/environ", True)]),
    (["node", "pool", "p", "--items", "i", "--brief=b", "--path", "."],
     [PathValue(4, "--items", "i", False), PathValue(5, "--brief", "b", True),
      PathValue(7, "--path", ".", False)]),
    # a path option as another option's value still counts (the safe side)
    (["node", "init", "k", "--task", "--task-file", "x"],
     [PathValue(5, "--task-file", "x", False)]),
    (["node", "init", "k", "--task-file"], []),  # no value: click refuses it
])
def test_every_path_an_argv_names_is_found(argv: list[str], found: list[PathValue]) -> None:
    assert path_values(argv) == found


W = PurePath("/t/repo/.worktrees/main.a")
# (sent directory, marked directories, the marked directory the refusal names or None)
SENT_DIRS = [
    (W, [], None),  # the worktree itself
    (W / "src" / "pkg", [], None),  # a plain directory in it
    (PurePath("/elsewhere"), [PurePath("/elsewhere")], None),  # outside: runs in W anyway
    (W / "x", [W / "x"], W / "x"),  # a nested repository, or a .git file naming one
    (W / "x" / ".worktrees" / "main.c", [W / "x" / ".worktrees" / "main.c", W / "x"],
     W / "x" / ".worktrees" / "main.c"),  # a worktree of the agent's own tree
    (W / "x" / "deep", [W / "x"], W / "x"),  # below a nested repository
    (W / "gitdir", [W / "gitdir"], W / "gitdir"),  # a git dir itself
    (W / "y", [W / "x"], None),  # a sibling of a nested repository is not in it
]


@pytest.mark.parametrize(("sent", "marked", "named"), SENT_DIRS)
def test_a_sent_directory_in_another_repository_is_refused(
        sent: PurePath, marked: list[PurePath], named: PurePath | None) -> None:
    why = foreign_repository(sent, W, marked)
    if named is None:
        assert why is None
    else:
        assert why is not None
        assert why.startswith(f"{named} is another repository inside your worktree")
        assert "run fractal from outside that directory" in why


@pytest.mark.parametrize("launch", [
    {"PATH": "/bin"},
    {"PATH": "/bin", "_NODE": "/t/repo/.worktrees/main/.fractal/main"},
    {"PATH": "/bin", "FRACTAL_RELAY": "/sock", "FRACTAL_RELAY_TOKEN": "secret"},
])
def test_the_verbs_environment_is_the_relays_node_without_the_relay(
        launch: dict[str, str]) -> None:
    env = verb_env(launch, "/t/node", {"FRACTAL_CONFINED": "1",
                                       "FRACTAL_RELAY_TOKEN": "secret"})
    assert env == {"PATH": "/bin", "_NODE": "/t/node", "FRACTAL_CONFINED": "1"}
