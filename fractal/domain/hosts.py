"""Which machine owns a node, and what a command on another machine may do about it.

A node row records its ``host`` (``nodes.host``: the machine whose clone holds the
node's worktree and runs its supervisor, agents and tmux pane). Its pid, process groups
and tmux socket mean something only there: on any other machine the same numbers name
other processes, or none. So a command here never signals, probes, heals or judges the
files of a node another host owns; what goes through the ledger (a stop, finish or
pause signal row, an approval) still reaches it, since its supervisor reads the ledger
and listens on the tree's wake channel.

Pure: the caller passes this machine's name (``store.backend.this_host``).
"""

from __future__ import annotations

__all__ = ["elsewhere", "host_refusal", "kill_refusal", "signal_note", "status_note"]


def elsewhere(host: str | None, here: str) -> str | None:
    """The host owning a node when it is another machine than ``here``; None when it is
    this one (a NULL ``host``, from a row older than the column, is this machine's)."""
    return host if host is not None and host != here else None


def kill_refusal(branch: str, host: str, here: str) -> str:
    """Why ``node kill`` refuses a node another host owns, and what to do instead."""
    return (f"node {branch} runs on host {host}, not on this one ({here}): its supervisor "
            f"and agents are processes there; run `fractal node kill {branch}` on {host}, "
            f"or `fractal node stop {branch}` from here (a stop reaches its supervisor "
            "through the ledger)")


def host_refusal(verb: str, branch: str, host: str, here: str) -> str:
    """Why ``verb`` (``start``, ``resume``: each hosts a supervisor, here) refuses a node
    another host owns, and what to do instead: its worktree and pane live there."""
    return (f"node {branch} belongs to host {host}, not this one ({here}): its worktree, "
            f"supervisor and pane live there; run `fractal node {verb} {branch}` on {host}")


def signal_note(host: str) -> str:
    """The note a signal verb adds for a node another host owns (the signal still goes)."""
    return f"its supervisor runs on host {host} and reads it from the ledger"


def status_note(host: str, here: str) -> str:
    """The detail ``node status`` adds for a node another host owns: what it did not
    check, and where to look."""
    return (f"on host {host}, not this one ({here}): its processes and worktree were not "
            f"checked from here; run `fractal node status` on {host} for them")
