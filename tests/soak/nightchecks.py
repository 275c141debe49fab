"""The pure rules of ``make night``'s invariants (tests/soak/night.py gathers the facts;
tests/soak/chaoschecks.py holds the tree soak's own). Each takes plain data and returns
the violations it finds as ``Violation`` rows, so each is tested on synthetic facts.

- ``ends``: every node ends ``completed``, or parked (``paused``) or waiting with a reason
  that names its cause, or ``exited`` on the USD cap it was given (``budget reached``);
- ``window_probes``: while a usage window is closed, the model calls on its credential are
  at most one per node on that credential (a launch already on its way when it closed)
  plus one probe per wait;
- ``launch_storms``: during a provider outage a node launches at most what the doubling
  back-off allows (``max_launches``);
- ``spend``: every run's spend (its own steps and every descendant run's) stays within the
  cap the node was given, plus the one launch in flight when the cap was reached;
- ``markers``: no branch holds a file with a conflict marker line;
- ``hostile``: every attack was tried, and each whose defence has landed met its expected
  outcome (``hostile.met``: a success, or a ``contained`` act where a refusal is due, is a
  violation).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from tests.soak.hostile import ATTACKS, Attack, judge, met
from tests.soak.invariants import Violation

WAITING = ("waiting for", "usage window", "outage", "approval", "database", "paused by")
"""Words a parked or waiting node's reason may name its cause with."""
CAPPED = "budget reached"
"""The words of a run that ended on its cost cap (``subtree cost budget reached (...)``)."""
MARKER = re.compile(r"^(<{7}|>{7}|\|{7})( |$)", re.MULTILINE)
"""A line git writes into a conflicted file (``=======`` alone is common in documents)."""


def ends(rows: Iterable[tuple[str, str, str]]) -> list[Violation]:
    """(node, status, reason) -> a violation for each node neither ``completed`` nor
    ``paused``/``active`` with a reason naming its cause (one of WAITING's words) nor
    ``exited`` on its cost cap (CAPPED)."""
    out = []
    for node, status, reason in rows:
        if status == "completed" or (status == "exited" and CAPPED in reason):
            continue
        named = any(word in reason.lower() for word in WAITING)
        if status in ("paused", "active") and named:
            continue
        out.append(Violation("ends", f"{node} ended {status}"
                                     + (f" ({reason})" if reason else " with no reason")))
    return out


def window_probes(calls: Iterable[tuple[float, str]], windows: Iterable[tuple[float, float]],
                  nodes: int, waits: int = 1) -> tuple[int, list[Violation]]:
    """``calls``: (epoch s, answer) of one credential's model calls (answer ``rejected``
    when the window turned it away); ``windows``: the (start, end) spans it was closed;
    ``nodes``: how many nodes use that credential; ``waits``: the waits each window may
    take. Returns (calls made while a window was closed, violations): a window that
    turned away more than ``nodes + waits`` calls."""
    calls = list(calls)
    total, out = 0, []
    for start, end in windows:
        rejected = sum(1 for at, answer in calls if start <= at < end and answer == "rejected")
        total += rejected
        if rejected > nodes + waits:
            out.append(Violation("window-probes", f"{rejected} model calls while the window "
                                                  f"of {start:.0f}-{end:.0f} was closed, "
                                                  f"more than {nodes} nodes + {waits} probe"))
    return total, out


def max_launches(span: float, first: float, cap: float) -> int:
    """The most launches one node may make in an outage of ``span`` seconds with a
    back-off whose first wait is ``first`` seconds, doubling to at most ``cap``: the
    launch in flight when it began, the one that met it, and one after each wait that
    ends inside the span."""
    launches, waited, wait = 2, 0.0, first
    while True:
        waited += wait
        if waited >= span:
            return launches
        launches += 1
        wait = min(wait * 2, cap)


def launch_storms(launches: Mapping[str, list[float]], outages: Iterable[tuple[float, float]],
                  first: float, cap: float) -> tuple[int, list[Violation]]:
    """``launches``: node -> the epoch seconds its launches started; ``outages``: the
    (start, end) spans its provider was down. Returns (launches during outages,
    violations): a node that launched more than ``max_launches`` in one span."""
    total, out = 0, []
    for start, end in merged(outages):
        bound = max_launches(end - start, first, cap)
        for node, starts in sorted(launches.items()):
            inside = sum(1 for at in starts if start <= at < end)
            total += inside
            if inside > bound:
                out.append(Violation("launch-storm", f"{node} launched {inside} times in "
                                                     f"the outage of {end - start:.0f} s "
                                                     f"(back-off allows {bound})"))
    return total, out


def merged(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) spans joined, in time order."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def spend(runs: Iterable[tuple[int, int | None, str, float]],
          caps: Mapping[str, float]) -> list[Violation]:
    """``runs``: (run id, parent run id, node, the run's own step spend in USD, NULL as 0);
    ``caps``: node -> the USD cap it was given. A violation for each run of a capped node
    whose spend with its descendant runs' exceeds the cap by more than the largest single
    run's own spend in its subtree (the launch in flight when the cap was reached)."""
    rows = list(runs)
    children: dict[int, list[int]] = {}
    own: dict[int, float] = {}
    for run, parent, _node, cost in rows:
        own[run] = cost
        if parent is not None:
            children.setdefault(parent, []).append(run)

    def subtree(run: int) -> list[int]:
        out, todo = [], [run]
        while todo:
            at = todo.pop()
            out.append(at)
            todo += children.get(at, [])
        return out

    out = []
    for run, _parent, node, _cost in rows:
        if node not in caps:
            continue
        runs_under = subtree(run)
        total = sum(own[r] for r in runs_under)
        slack = max(own[r] for r in runs_under)
        if total > caps[node] + slack + 1e-9:
            out.append(Violation("spend", f"{node} run {run} spent {total:.4f} USD, over its "
                                          f"cap {caps[node]:.4f}"))
    return out


def markers(files: Iterable[tuple[str, str, str]]) -> list[Violation]:
    """(branch, path, text) -> a violation per file holding a conflict marker line."""
    return [Violation("conflict-marker", f"{branch}: {path} holds a conflict marker")
            for branch, path, text in files if MARKER.search(text)]


def hostile(facts: Mapping[str, dict[str, object]], attacks: Sequence[Attack] = ATTACKS
            ) -> tuple[dict[str, str], list[Violation]]:
    """``facts``: attack name -> its facts (``hostile.judge``); ``attacks`` the table's
    rows. Returns (attack -> outcome, violations): an attack that was never tried, or whose
    defence has landed and which did not meet its expected outcome (``hostile.met``)."""
    outcomes, out = {}, []
    for attack in attacks:
        outcome = judge(attack.name, dict(facts.get(attack.name, {})))
        outcomes[attack.name] = outcome
        if outcome == "untried":
            out.append(Violation("hostile", f"{attack.name} was never tried"))
        elif attack.landed and not met(attack, outcome):
            out.append(Violation("hostile", f"{attack.name} {outcome} (expected "
                                            f"{attack.expected}: {attack.defence})"))
    return outcomes, out
