"""The ``notify`` command's contract: which events it gets, what it sees, what it never
sees (pure: mappings in, mappings out).

One run of the command carries one *batch*: the attention events that appeared since
the last look, so a subtree landing at once is one notification. The batch is JSON on
its stdin and, flattened, ``FRACTAL_EVENT_*`` variables. Its environment is an
allow-list of the caller's: the variables a desktop notifier, a shell or a terminal needs
(``PASSED_VARS``, ``LC_*``) and the ones the user names ``FRACTAL_NOTIFY_*`` on purpose
(a webhook URL, a topic). Nothing else passes: no API key, token or password whatever its
name, and none of the loop's own variables.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["LOOP_VARS", "PASSED_VARS", "SECRET_SUFFIXES", "batch_env", "batch_payload",
           "is_secret", "notify_env", "wanted_kinds"]

PASSED_VARS = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
    "TMUX", "TMUX_PANE", "DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR"})
"""The caller's variables a notify command gets (plus ``LC_*`` and ``FRACTAL_NOTIFY_*``)."""

SECRET_SUFFIXES = ("_API_KEY", "_APIKEY", "_KEY", "_TOKEN", "_SECRET", "_PASSWORD",
                   "_PASSWD", "_CREDENTIALS", "_AUTH")
"""A variable whose name ends in one of these never reaches the command."""
LOOP_VARS = ("_NODE", "FRACTAL_LAUNCH_ID", "RUN_ID", "ITER", "ITER_ID", "STEP_ID", "ITER_REF",
             "NODE_BRANCH", "NODE_DIR", "WORKTREE_DIR", "STEP_LABEL", "ITER_LABEL",
             "AGENT_COMMAND")
"""The loop's variables: a hook must not pass for part of a node's run."""


def is_secret(name: str) -> bool:
    """True for a credential-looking variable name (case-insensitive)."""
    upper = name.upper()
    return upper.endswith(SECRET_SUFFIXES) or "SECRET" in upper or upper in (
        "TOKEN", "API_KEY", "PASSWORD")


def _passes(name: str) -> bool:
    if name in LOOP_VARS or is_secret(name):
        return False
    return name in PASSED_VARS or name.startswith(("LC_", "FRACTAL_NOTIFY_"))


def notify_env(base: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``base`` (module docstring); a credential-looking name
    is dropped even under ``FRACTAL_NOTIFY_``."""
    return {k: v for k, v in base.items() if _passes(k)}


def wanted_kinds(setting: object, known: Iterable[str]) -> tuple[set[str], list[str]]:
    """The kinds ``notify_events`` selects, and its problems.

    None or missing: every kind. A list of names or a comma-separated string: those
    kinds; an unknown name is reported and ignored.
    """
    every = set(known)
    if setting is None:
        return every, []
    if isinstance(setting, str):
        names = [n.strip() for n in setting.split(",") if n.strip()]
    elif isinstance(setting, list) and all(isinstance(n, str) for n in setting):
        names = [str(n).strip() for n in setting]
    else:
        return every, [f"notify_events must be a list of kinds or a comma-separated string, "
                       f"not {setting!r}; notifying every kind"]
    unknown = [n for n in names if n not in every]
    problems = [f"notify_events: unknown kind {n!r} (known: {', '.join(sorted(every))})"
                for n in unknown]
    return {n for n in names if n in every}, problems


def batch_payload(batch: str, tree: str, events: Sequence[Mapping[str, object]]) -> str:
    """The JSON the command reads on stdin: ``{batch, tree, count, events: [...]}``."""
    return json.dumps({"batch": batch, "tree": tree, "count": len(events),
                       "events": list(events)}, default=str)


def batch_env(batch: str, tree: str, events: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """``FRACTAL_EVENT_*`` variables of a batch: the first event's ``KIND``, ``NODE``,
    ``SUMMARY``, ``COMMAND`` and ``ID``; ``COUNT``; ``KINDS`` and ``NODES`` (comma-joined,
    first-seen order); ``TITLE`` a one-line headline; ``BATCH`` and ``TREE``."""
    first = events[0] if events else {}
    kinds = list(dict.fromkeys(str(e.get("kind", "")) for e in events))
    nodes = list(dict.fromkeys(str(e.get("node", "")) for e in events))
    if len(events) == 1:
        title = f"fractal: {first.get('node')} {first.get('kind')}: {first.get('summary')}"
    else:
        title = f"fractal: {len(events)} events in {tree} ({', '.join(kinds)})"
    env = {"BATCH": batch, "TREE": tree, "COUNT": str(len(events)), "KINDS": ",".join(kinds),
           "NODES": ",".join(nodes), "TITLE": title}
    for key in ("kind", "node", "summary", "command", "id"):
        env[key.upper()] = str(first.get(key, ""))
    return {f"FRACTAL_EVENT_{k}": " ".join(v.split())[:1000] for k, v in env.items()}
