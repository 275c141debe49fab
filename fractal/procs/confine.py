"""A node's sandboxed command line, built where both the loop and a verb need it: the
supervisor confines every agent launch, ``setup.sh`` and check command
(``runtime/sandboxing``), and ``fractal commit``, run for a sandboxed agent through its
relay, confines the user's hooks the same way (``lifecycle/commit``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fractal.domain.sandbox import no_new_reflogs, object_env, policy
from fractal.errors import SpawnError
from fractal.procs.sandbox import wrap
from fractal.tree import NodePaths, Tree
from fractal.workspace.sandboxpaths import sandbox_paths

__all__ = ["CONFINED_ENV", "confined_argv", "relay_socket"]

CONFINED_ENV = "FRACTAL_CONFINED"
"""Set by a node's relay on the verbs it runs for the node's sandboxed agent: the programs
those verbs start for the agent (``fractal commit``'s hooks) run in its sandbox too."""


def relay_socket(tree: Tree, branch: str) -> Path:
    """``<tree data dir>/relay/<branch>.sock``: the node's relay (``runtime/relay``)."""
    return tree.data_dir / "relay" / f"{branch}.sock"


def confined_argv(paths: NodePaths, env: Mapping[str, str], argv: Sequence[str], cwd: Path,
                  *, relay: Path | None, token: str | None = None) -> list[str]:
    """``argv`` wrapped in the node's sandbox (``domain.sandbox.policy``), starting in
    ``cwd``; ``env`` gives ``$HOME`` and fractal's tmux socket (hidden); ``relay`` is
    bound in when given, and ``token`` (the relay's secret for this launch) set inside;
    every git inside writes new objects into the node's private object directory
    (``domain.sandbox.object_env``) and creates no reflog
    (``domain.sandbox.no_new_reflogs``). Raises SpawnError when the node's git files
    cannot be read."""
    # deferred: only a sandboxed launch needs the socket's path (1 module)
    from fractal import tmux

    try:
        found = sandbox_paths(paths.tree.repo, paths.worktree, paths.node_dir, paths.branch,
                              tmux_socket=tmux.socket_path(env), relay=relay,
                              home=env.get("HOME"), program=argv[0] if argv else None,
                              env=env)
    except OSError as exc:
        raise SpawnError(f"cannot lay out the sandbox: {exc}") from exc
    return wrap(argv, policy(found), relay=None if relay is None else str(relay),
                cwd=str(cwd), token=token,
                setenv={**object_env(found), **no_new_reflogs(env)})
