"""What in a tree waits for a human: the attention items of ``fractal inbox``, the
dashboard's inbox pane and the ``notify`` command.

Pure: each node's facts in (read by the store, instants as epoch seconds, ``now`` passed
in), items out. Every kind is one entry of ``RULES``: a detector over one node's facts
that returns the item or None. Each item carries the exact command that resolves it, a
stable ``key`` (kind, node and the row it is about) and a ``fingerprint`` of its state:
an acknowledgement hides the item while both still match.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from fractal.domain.budget import is_budget_reason

__all__ = ["RULES", "STALL_FLOOR_S", "Gate", "Item", "Kind", "NodeFacts", "Rule", "classify",
           "item_id", "stall_after"]

STALL_FLOOR_S = 300
"""An active node is stalled after writing nothing for max(step_timeout, this) seconds."""

ABNORMAL = "Loop exited abnormally"


class Kind(StrEnum):
    """Attention kinds, as ``notify_events`` and ``--json`` name them."""

    GATE = "gate"
    EXITED = "exited"
    BUDGET = "budget"
    NO_PROGRESS = "no-progress"
    INTERRUPTED = "interrupted"
    PAUSED = "paused"
    STALL = "stall"


@dataclass(frozen=True)
class Gate:
    """A step awaiting its parent's approval: row id, name, when it opened (epoch s), the
    ``diffstat`` of the node's branch against its parent's (None when unknown)."""

    step_id: int
    step_name: str
    since: float
    diffstat: str | None = None


@dataclass(frozen=True)
class NodeFacts:
    """What the store knows about one node, for the detectors.

    ``run_*`` describe its newest run (``run_id`` None: it never ran); ``run_spent`` USD
    of that run's own steps, None when no step recorded a cost. ``last_write`` is the
    newest instant the node wrote anything (a row, its pane transcript); ``gone`` is True
    for an active node whose supervisor is provably gone (shown, never written).
    ``paused_since``/``pause_reason`` come from its newest ``pause`` event.
    """

    branch: str
    status: str
    run_id: int | None = None
    run_status: str | None = None
    run_exit: int | None = None
    run_reason: str = ""
    run_ended: float | None = None
    run_spent: float | None = None
    run_cap: float | None = None
    gates: tuple[Gate, ...] = ()
    last_write: float | None = None
    step_timeout: int | None = None
    gone: bool = False
    paused_since: float | None = None
    pause_reason: str = ""
    title: str = ""


@dataclass(frozen=True)
class Item:
    """One thing waiting for a human. ``since`` epoch seconds; ``command`` resolves it."""

    kind: Kind
    node: str
    since: float
    summary: str
    command: str
    key: str
    fingerprint: str
    details: Mapping[str, object] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return item_id(self.key)


def item_id(key: str) -> str:
    """The short id ``fractal inbox ack`` takes: 8 hex digits of the key's SHA-1."""
    return hashlib.sha1(key.encode()).hexdigest()[:8]


def stall_after(step_timeout: int | None) -> int:
    """Seconds of silence after which an active node counts as stalled."""
    return max(step_timeout or 0, STALL_FLOOR_S)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _spend(facts: NodeFacts) -> str:
    cap = "" if facts.run_cap is None else f" of {_usd(facts.run_cap)}"
    return f"spent {_usd(facts.run_spent)}{cap}"


def _run_end(facts: NodeFacts, kind: Kind, command: str) -> Item | None:
    if facts.run_id is None or facts.run_ended is None:
        return None
    return Item(kind, facts.branch, facts.run_ended,
                f"run {facts.run_id} exited: {facts.run_reason} ({_spend(facts)})", command,
                key=f"{kind.value}:{facts.branch}:{facts.run_id}",
                fingerprint=f"{facts.run_id}:{facts.run_ended}",
                details={"run_id": facts.run_id, "reason": facts.run_reason,
                         "spent": facts.run_spent, "max_cost": facts.run_cap,
                         "exit_code": facts.run_exit})


def _settled_exited(facts: NodeFacts) -> bool:
    return facts.status == "exited" and facts.run_status == "exited"


def _exit_kind(facts: NodeFacts) -> Kind:
    """Which of the exited kinds the newest run's end is."""
    reason = facts.run_reason
    if facts.run_exit == 0 and is_budget_reason(reason):
        return Kind.BUDGET
    if reason.startswith("no progress"):
        return Kind.NO_PROGRESS
    if reason.startswith(ABNORMAL):
        return Kind.INTERRUPTED
    return Kind.EXITED


def _exited(kind: Kind, command: Callable[[str], str]) -> Callable[[NodeFacts], Item | None]:
    def detect(facts: NodeFacts) -> Item | None:
        if not _settled_exited(facts) or _exit_kind(facts) is not kind:
            return None
        return _run_end(facts, kind, command(facts.branch))
    return detect


def _gate(facts: NodeFacts) -> Item | None:
    if facts.status not in ("active", "paused") or not facts.gates:
        return None
    gate = facts.gates[-1]
    stat = f"; {gate.diffstat}" if gate.diffstat else ""
    return Item(Kind.GATE, facts.branch, gate.since,
                f"step {gate.step_id} ({gate.step_name}) awaits approval{stat}",
                f"fractal node approve {facts.branch} {gate.step_id}",
                key=f"gate:{facts.branch}:{gate.step_id}", fingerprint=str(gate.step_id),
                details={"step_id": gate.step_id, "step_name": gate.step_name,
                         "diffstat": gate.diffstat})


def _gone(facts: NodeFacts) -> Item | None:
    if facts.status != "active" or not facts.gone:
        return None
    since = facts.last_write if facts.last_write is not None else 0.0
    return Item(Kind.INTERRUPTED, facts.branch, since,
                "recorded active, but its supervisor is gone",
                f"fractal node status {facts.branch}",
                key=f"interrupted:{facts.branch}:{facts.run_id}:gone",
                fingerprint=f"{facts.run_id}", details={"run_id": facts.run_id})


def _paused(facts: NodeFacts) -> Item | None:
    if facts.status != "paused":
        return None
    since = facts.paused_since if facts.paused_since is not None else 0.0
    why = f": {facts.pause_reason}" if facts.pause_reason else ""
    return Item(Kind.PAUSED, facts.branch, since, f"paused{why}",
                f"fractal node resume {facts.branch}",
                key=f"paused:{facts.branch}:{facts.run_id}", fingerprint=f"{since}",
                details={"run_id": facts.run_id, "reason": facts.pause_reason})


def _stall_at(facts: NodeFacts, now: float) -> Item | None:
    if facts.status != "active" or facts.gone or facts.gates or facts.last_write is None:
        return None
    quiet = now - facts.last_write
    limit = stall_after(facts.step_timeout)
    if quiet <= limit:
        return None
    return Item(Kind.STALL, facts.branch, facts.last_write,
                f"active, but wrote nothing for {int(quiet // 60)}m (stall after "
                f"{limit // 60}m)", f"fractal node attach {facts.branch}",
                key=f"stall:{facts.branch}:{facts.run_id}",
                fingerprint=f"{facts.last_write}", details={"quiet_s": int(quiet)})


@dataclass(frozen=True)
class Rule:
    """One attention kind: ``detect(facts, now)`` returns its item for a node, or None."""

    kind: Kind
    detect: Callable[[NodeFacts, float], Item | None]


def _ignore_now(detect: Callable[[NodeFacts], Item | None]
                ) -> Callable[[NodeFacts, float], Item | None]:
    return lambda facts, _now: detect(facts)


RULES: tuple[Rule, ...] = (
    Rule(Kind.GATE, _ignore_now(_gate)),
    Rule(Kind.BUDGET, _ignore_now(_exited(
        Kind.BUDGET, lambda b: f"fractal node start {b} --continue --max-cost USD"))),
    Rule(Kind.NO_PROGRESS, _ignore_now(_exited(
        Kind.NO_PROGRESS, lambda b: f"fractal node start {b} --continue"))),
    Rule(Kind.INTERRUPTED, _ignore_now(_exited(
        Kind.INTERRUPTED, lambda b: f"fractal node start {b} --continue"))),
    Rule(Kind.INTERRUPTED, _ignore_now(_gone)),
    Rule(Kind.EXITED, _ignore_now(_exited(
        Kind.EXITED, lambda b: f"fractal node start {b} --continue"))),
    Rule(Kind.PAUSED, _ignore_now(_paused)),
    Rule(Kind.STALL, _stall_at),
)
"""Every attention kind, one entry each (a node may match several)."""


def classify(facts: Iterable[NodeFacts], now: float,
             acks: Mapping[str, str] | None = None, *, include_acked: bool = False
             ) -> list[tuple[Item, bool]]:
    """Every item of every node, oldest first (ties by node, then kind), each with
    whether it is acknowledged: ``acks`` maps an item key to the fingerprint it was
    acknowledged at. Acknowledged items are left out unless ``include_acked``."""
    acks = acks or {}
    found: list[tuple[Item, bool]] = []
    for node in facts:
        for rule in RULES:
            item = rule.detect(node, now)
            if item is None:
                continue
            acked = acks.get(item.key) == item.fingerprint
            if include_acked or not acked:
                found.append((item, acked))
    found.sort(key=lambda pair: (pair[0].since, pair[0].node, pair[0].kind.value))
    return found
