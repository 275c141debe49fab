# Over 400 lines: the attention kinds are one table (RULES) of one detector each; they
# read the same facts and word their items alike, so they stay side by side.
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
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from fractal.domain.attention.facts import (
    Gate,
    HandBack,
    NodeFacts,
    Note,
    OutageHold,
    UsageHold,
)
from fractal.domain.budget.ceilings import is_budget_reason
from fractal.domain.merge.rules import FORCE_HINT, unresolved_hand_back
from fractal.domain.run.failstreak import FAILED_ITERS
from fractal.domain.run.subtree import unsettled_notice
from fractal.domain.usage.outage import CUT_SHORT

__all__ = ["FOLLOWER_UNTIL", "RULES", "STALL_FLOOR_S", "Gate", "HandBack", "Item", "Kind", "NodeFacts", "Note",
           "OutageHold", "Rule", "UsageHold", "classify", "item_id", "stall_after", "stalled"]

STALL_FLOOR_S = 300
"""An active node is stalled after writing nothing for max(step_timeout, this) seconds."""

ABNORMAL = "Loop exited abnormally"

BRAKED = ("the tree is braked (`fractal pause`): `fractal resume` lifts the brake and "
          "resumes every parked node")
"""What a paused item adds while the tree-wide brake is on (``NodeFacts.braked``)."""


class Kind(StrEnum):
    """Attention kinds, as ``notify_events`` and ``--json`` name them."""

    GATE = "gate"
    EXITED = "exited"
    BUDGET = "budget"
    NO_PROGRESS = "no-progress"
    INTERRUPTED = "interrupted"
    PAUSED = "paused"
    STALL = "stall"
    USAGE = "usage"
    OUTAGE = "outage"
    MERGE = "merge"
    ORPHANS = "orphans"
    MESSAGE = "message"
    UNSTARTED = "unstarted"
    READY = "ready"


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
    cause = f"; {facts.run_cause}" if facts.run_cause else ""
    return Item(kind, facts.branch, facts.run_ended,
                f"run {facts.run_id} exited: {facts.run_reason} ({_spend(facts)}){cause}",
                command,
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


def _merged_since_end(facts: NodeFacts) -> bool:
    """True when the node's work was merged after its last run ended: the run's end no
    longer waits for anyone (its parent took what it left)."""
    return (facts.merged_at is not None and facts.run_ended is not None
            and facts.merged_at >= facts.run_ended)


def _starting(facts: NodeFacts, command: str) -> str:
    """``command`` (one that starts a node) as it works in the tree's state: behind
    ``fractal resume`` while the brake is on (a start is refused until it is lifted)."""
    return f"fractal resume && {command}" if facts.braked else command


def _failing_agent(facts: NodeFacts) -> bool:
    """True when the run ended because every iteration failed (``max_failed_iters`` in a
    row): an agent that fails every time, which ``--continue`` alone would meet again."""
    head, _, rest = facts.run_reason.partition(" ")
    return head.isdigit() and rest.startswith(FAILED_ITERS)


def _exited(kind: Kind, command: Callable[[str], str]) -> Callable[[NodeFacts], Item | None]:
    def detect(facts: NodeFacts) -> Item | None:
        if not _settled_exited(facts) or _exit_kind(facts) is not kind \
                or _merged_since_end(facts):
            return None
        again = _starting(facts, command(facts.branch))
        if not _failing_agent(facts):
            return _run_end(facts, kind, again)
        item = _run_end(facts, kind, f"fractal node activity {facts.branch}")
        if item is None:
            return None
        help_ = (f"; every iteration failed, so `fractal node start --continue` alone fails "
                 f"the same way: look at the failed step's reason (`fractal node activity "
                 f"{facts.branch}`), fix its cause (the agent setting: `fractal node config "
                 f"set --node {facts.branch} agent=...` at the main checkout, or its "
                 f"config.json), then `{again}`")
        return replace(item, summary=item.summary + help_)
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
    reason = facts.pause_reason.removeprefix("parked ")  # `paused: during PLAN`, said once
    # A heal's park record is written by a command, so it reads as an ask too: said once.
    asked = facts.pause_asked if facts.pause_asked != facts.pause_reason else ""
    if asked:  # `paused: lunch (during PLAN)`: the asker's words first
        reason = f"{asked} ({reason})" if reason else asked
    why = f": {reason}" if reason else ""
    brake = f"; {BRAKED}" if facts.braked else ""
    return Item(Kind.PAUSED, facts.branch, since, f"paused{why}{brake}",
                "fractal resume" if facts.braked else f"fractal node resume {facts.branch}",
                key=f"paused:{facts.branch}:{facts.run_id}",
                fingerprint=f"{since}:braked" if facts.braked else f"{since}",
                details={"run_id": facts.run_id, "reason": facts.pause_reason,
                         "asked": asked})


def stalled(facts: NodeFacts, now: float, step_timeout: int | None) -> bool:
    """Whether an active node counts as stalled at ``now`` (epoch s): it wrote nothing for
    more than ``stall_after(step_timeout)`` seconds and is in no recorded wait (its own
    gate, a usage window, a provider outage, or its children: a ``WAIT`` step, whose
    children's gates and unstarted children have items of their own). Waits are quiet."""
    if facts.status != "active" or facts.gone or facts.gates or facts.last_write is None \
            or facts.usage is not None or facts.outage is not None or facts.waiting_children:
        return False
    return now - facts.last_write > stall_after(step_timeout)


def _stall_at(facts: NodeFacts, now: float) -> Item | None:
    if not stalled(facts, now, facts.step_timeout):
        return None
    assert facts.last_write is not None  # stalled() said so
    quiet = now - facts.last_write
    limit = stall_after(facts.step_timeout)
    return Item(Kind.STALL, facts.branch, facts.last_write,
                f"active, but wrote nothing for {int(quiet // 60)}m (stall after "
                f"{limit // 60}m)", f"fractal node attach {facts.branch}",
                key=f"stall:{facts.branch}:{facts.run_id}",
                fingerprint=f"{facts.last_write}", details={"quiet_s": int(quiet)})


FOLLOWER_UNTIL = "until another node's probe of it gets through"
"""How long a usage-window wait lasts when no window is closed: the node follows another
node's probe (the inbox item and the dashboard's tree line both say it)."""


def _iso(instant: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(instant))


def _usage(facts: NodeFacts) -> Item | None:
    hold = facts.usage
    if facts.status != "active" or hold is None or facts.gone:
        return None
    window = f" ({hold.window})" if hold.window else ""
    until = (f"until {_iso(hold.until)}" if hold.until is not None else
             f"{FOLLOWER_UNTIL} (the window reopened or is being probed; it launches in its "
             "turn)")
    return Item(Kind.USAGE, facts.branch, hold.since,
                f"waiting for usage window{window} {until}; it launches again by "
                "itself then (the command ends the wait instead)",
                f"fractal node stop {facts.branch}",
                key=f"usage:{facts.branch}:{hold.event_id}",
                fingerprint=f"{hold.event_id}:{hold.until}",
                details={"until": None if hold.until is None else _iso(hold.until),
                         "window": hold.window, "run_id": facts.run_id})


def _outage(facts: NodeFacts) -> Item | None:
    hold = facts.outage
    if facts.status != "active" or hold is None or facts.gone:
        return None
    return Item(Kind.OUTAGE, facts.branch, hold.since,
                f"{hold.shown}; it launches again by itself then (the command launches now)",
                CUT_SHORT.format(node=facts.branch),
                key=f"outage:{facts.branch}:{hold.event_id}",
                fingerprint=f"{hold.event_id}:{hold.shown}",
                details={"wait": hold.shown, "run_id": facts.run_id})


def _merge(facts: NodeFacts) -> Item | None:
    merge = facts.merge
    if merge is None or facts.status in ("active", "paused"):
        return None  # the child's loop is still at work on it
    if merge.unresolved is not None:  # a later plain merge attempt conflicted again
        summary = (f"merge into {merge.target} was handed back; its run has ended with the "
                   "merge unresolved. "
                   + unresolved_hand_back(facts.branch, merge.target, merge.unresolved))
        command = _starting(facts, f"fractal node start {facts.branch} --continue")
    elif merge.handed_back:
        summary = (f"merge into {merge.target} was handed back ({merge.reason}); its run "
                   "has ended: merge again")
        command = f"fractal node merge {facts.branch}"
    elif merge.reason.startswith("conflict in"):
        summary = f"merge into {merge.target} failed: {merge.reason}"
        command = f"fractal node merge {facts.branch} --hand-back"
    else:
        summary = f"merge into {merge.target} did not land: {merge.reason}"
        force = " --force" if FORCE_HINT in merge.reason else ""  # a plain one is refused
        command = f"fractal node merge {facts.branch}{force}"
    if facts.parent_running and command.startswith("fractal node merge"):
        command = _ask_parent(facts, f"merge {facts.branch.rsplit('.', 1)[-1]}")
    return Item(Kind.MERGE, facts.branch, merge.since, summary, command,
                key=f"merge:{facts.branch}:{merge.merge_id}", fingerprint=str(merge.merge_id),
                details={"merge_id": merge.merge_id, "target": merge.target,
                         "reason": merge.reason, "handed_back": merge.handed_back})


def _ask_parent(facts: NodeFacts, subject: str) -> str:
    """A command the operator can run while the node's parent runs (only the parent's
    own loop may merge into it then): a message to that loop's inbox, which its next
    SYNC digest shows."""
    parent = facts.branch.rpartition(".")[0]
    return (f"fractal radio send --node {parent} --subject '{subject}' --priority 7 "
            f"'{subject}: fractal inbox has the details'")


_SETTLED = ("completed", "stopped", "exited", "killed")


def _orphans(facts: NodeFacts) -> Item | None:
    if facts.status not in _SETTLED or facts.run_ended is None or not facts.running_below:
        return None
    notice = unsettled_notice(facts.running_below)
    assert notice is not None
    branches = sorted(u.branch for u in facts.running_below)
    return Item(Kind.ORPHANS, facts.branch, facts.run_ended, f"run {facts.run_id} {notice}",
                f"fractal node finish {facts.branch}",
                key=f"orphans:{facts.branch}:{facts.run_id}", fingerprint=",".join(branches),
                details={"run_id": facts.run_id, "children": branches})


def _message(facts: NodeFacts) -> Item | None:
    notes = facts.to_operator
    if not notes:
        return None
    newest = notes[-1]
    count = f"{len(notes)} messages" if len(notes) > 1 else "a message"
    return Item(Kind.MESSAGE, facts.branch, notes[0].since,
                f"sent you {count}: {newest.subject}",
                "fractal radio read " + " ".join(n.uuid for n in notes),
                key=f"message:{facts.branch}", fingerprint=newest.uuid,
                details={"messages": [n.uuid for n in notes],
                         "priority": max(n.priority for n in notes)})


def _unstarted(facts: NodeFacts) -> Item | None:
    if facts.status != "active" or not facts.waiting_children or not facts.unstarted:
        return None
    names = ", ".join(b.rsplit(".", 1)[-1] for b in facts.unstarted)
    count = "1 child" if len(facts.unstarted) == 1 else f"{len(facts.unstarted)} children"
    since = facts.waiting_since if facts.waiting_since is not None else \
        facts.last_write if facts.last_write is not None else 0.0
    return Item(Kind.UNSTARTED, facts.branch, since,
                f"waits for {count} nobody has started ({names}); it waits until each "
                "is started and settles",
                _starting(facts, " && ".join(f"fractal node start {b}"
                                             for b in facts.unstarted)),
                key=f"unstarted:{facts.branch}:{facts.run_id}",
                fingerprint=",".join(facts.unstarted),
                details={"run_id": facts.run_id, "children": list(facts.unstarted)})


def _ready(facts: NodeFacts) -> Item | None:
    """A top-level node whose newest run completed, not merged since: the operator
    reviews and merges it (nobody else merges into the root's branch). When that run's
    end found work of its subtree never merged into it (``unmerged_below``, booked at the
    end), it is not announced ready: the item names that work and offers the merge
    without it (``--force``), since the plain merge is refused until it is in."""
    if not facts.top_level or facts.status != "completed" or facts.run_status != "completed" \
            or facts.run_id is None or facts.run_ended is None or _merged_since_end(facts):
        return None
    target, review = facts.parent, f"fractal node diff {facts.branch}"
    details: dict[str, object] = {"run_id": facts.run_id, "target": target,
                                  "reason": facts.run_reason, "review": review}
    if facts.unmerged_below:
        return Item(Kind.READY, facts.branch, facts.run_ended,
                    f"run {facts.run_id} completed, but work of its subtree never reached it "
                    f"({facts.unmerged_below}): `fractal node merge {facts.branch}` is refused "
                    f"until it does (the node's own run merges it: `fractal node start "
                    f"{facts.branch} --continue`); to merge into {target} without it, review "
                    f"`{review}`",
                    f"fractal node merge {facts.branch} --force",
                    key=f"ready:{facts.branch}:{facts.run_id}",
                    fingerprint=f"{facts.run_id}:{facts.run_ended}:unmerged",
                    details={**details, "unmerged": facts.unmerged_below})
    return Item(Kind.READY, facts.branch, facts.run_ended,
                f"run {facts.run_id} completed: ready to merge into {target} (review it: "
                f"`{review}`)",
                f"fractal node merge {facts.branch}",
                key=f"ready:{facts.branch}:{facts.run_id}",
                fingerprint=f"{facts.run_id}:{facts.run_ended}", details=details)


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
    Rule(Kind.USAGE, _ignore_now(_usage)),
    Rule(Kind.OUTAGE, _ignore_now(_outage)),
    Rule(Kind.MERGE, _ignore_now(_merge)),
    Rule(Kind.ORPHANS, _ignore_now(_orphans)),
    Rule(Kind.MESSAGE, _ignore_now(_message)),
    Rule(Kind.UNSTARTED, _ignore_now(_unstarted)),
    Rule(Kind.READY, _ignore_now(_ready)),
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
