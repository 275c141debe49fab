"""Every status a node or a ledger row can hold, and the table of legal node moves.

A node changes status only by a ``Move``: one row of ``RULES`` names the statuses it may
start from, the statuses it may land on, and what else the same write transaction does
(which open rows it closes, whether it records or clears the supervisor). The store
performs a move in one transaction (``Ledger.move``); this module only decides. A new
node state is new ``Status`` members and new or widened ``Rule`` rows here, never a new
``if`` at a call site (``docs/architecture.md`` has a worked example).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum

from fractal.domain.errors import FractalError

__all__ = [
    "ITERATION_STATUSES",
    "NODE_STATUSES",
    "RULES",
    "RUN_STATUSES",
    "SETTLED",
    "STEP_STATUSES",
    "UNSETTLED",
    "Closes",
    "IllegalMove",
    "Move",
    "Rule",
    "Status",
    "SupervisorEffect",
    "land",
    "moves_from",
    "refusal",
    "rule_of",
]


class Status(StrEnum):
    """Every status a node or a run/iteration/step row can hold.

    ``idle`` and ``retired`` are node-only; ``failed`` is row-only (a run never fails, it
    exits). A member compares equal to its text (``Status.ACTIVE == "active"``).
    """

    ACTIVE = "active"
    PAUSED = "paused"
    IDLE = "idle"
    COMPLETED = "completed"
    STOPPED = "stopped"
    EXITED = "exited"
    KILLED = "killed"
    FAILED = "failed"
    RETIRED = "retired"
    MISSING = "missing"
    """Node-only: its worktree or branch vanished behind fractal's back."""


SETTLED: frozenset[Status] = frozenset(
    {Status.COMPLETED, Status.STOPPED, Status.EXITED, Status.KILLED})
"""Terminal statuses: the node no longer holds a spawn slot."""

UNSETTLED: frozenset[Status] = frozenset({Status.ACTIVE, Status.PAUSED, Status.IDLE})
"""Live statuses: the node holds a spawn slot."""

NODE_STATUSES: frozenset[Status] = UNSETTLED | SETTLED | {Status.RETIRED, Status.MISSING}
"""What the ``nodes`` table holds."""

RUN_STATUSES: frozenset[Status] = frozenset({Status.ACTIVE}) | SETTLED
"""What a run row holds: ``active`` while open (a parked run stays open and active)."""

ITERATION_STATUSES: frozenset[Status] = RUN_STATUSES | {Status.FAILED}
"""What an iteration row holds."""

STEP_STATUSES: frozenset[Status] = ITERATION_STATUSES | {Status.PAUSED}
"""What a step row holds: ``paused`` is a step parked by a pause or an approval wait."""


class Move(StrEnum):
    """A change of a node's status, named by what causes it."""

    START = "start"
    """A fresh supervisor takes an idle node."""
    RESUME = "resume"
    """A relaunched supervisor takes its parked node back."""
    PARK = "park"
    """A pause (or an approval wait a pause interrupts) parks the run; rows stay open."""
    END = "end"
    """The loop closes its run with the terminal matrix's verdict."""
    ABORT = "abort"
    """The loop cannot go on (a preflight failure, its own crash): every open row exits."""
    HEAL = "heal"
    """A reader found the node active with its supervisor provably gone: its run is parked
    (``interrupted: supervisor lost``), or ends ``exited`` when it never opened one."""
    INTERRUPT = "interrupt"
    """The supervisor lost its host (SIGHUP, SIGTERM, SIGINT without a kill verb): the run
    parks as a pause does, every open step closing ``paused``; run and iteration stay open."""
    KILL = "kill"
    """``fractal node kill``: recorded before any process is stopped."""
    REARM = "rearm"
    """``start --continue`` makes a settled node startable again."""
    DISARM = "disarm"
    """A re-armed start that failed to boot puts the node back as it was."""
    RETIRE = "retire"
    """A settled (or never started) node is hidden; its branch and rows stay."""
    UNRETIRE = "unretire"
    """A retired node gets back the status it had before."""
    VANISH = "vanish"
    """A reader found a resting node's worktree or branch gone (a live node is left to its
    loop or to heal; ``fractal node delete`` deregisters a missing one)."""
    RECOVER = "recover"
    """A missing node's worktree and branch are back: it gets the status it had before."""


class Closes(Enum):
    """Which of the node's open ledger rows a move closes, in the same transaction."""

    NOTHING = "nothing"
    STEP = "step"
    """The step the caller names (if any) closes ``paused``."""
    RUN = "run"
    """The run the caller names closes with the status the node lands on."""
    OPEN_ROWS = "open rows"
    """Every open step, iteration and run closes with the status the node lands on."""
    OPEN_STEPS = "open steps"
    """When the node lands on ``paused``: every open step closes ``paused``, its iteration
    and run stay open (resumable). On any other landing: as OPEN_ROWS."""


class SupervisorEffect(Enum):
    """What a move does to the node's recorded supervisor pid."""

    KEEP = "keep"
    RECORD = "record"
    """The caller's pid and create time are recorded (the supervisor taking the node)."""
    CLEAR = "clear"


@dataclass(frozen=True)
class Rule:
    """One legal move: from any of ``sources`` to one of ``targets`` (the first target is
    the default when the caller names none). A move that lands on ``exited`` while the
    node has an open run also posts the exit notice (every exited run posts one)."""

    move: Move
    sources: frozenset[Status]
    targets: tuple[Status, ...]
    closes: Closes = Closes.NOTHING
    supervisor: SupervisorEffect = SupervisorEffect.KEEP


def _rule(move: Move, sources: Iterable[Status], targets: Iterable[Status], *,
          closes: Closes = Closes.NOTHING,
          supervisor: SupervisorEffect = SupervisorEffect.KEEP) -> Rule:
    return Rule(move, frozenset(sources), tuple(targets), closes, supervisor)


_SETTLED_ORDER = (Status.COMPLETED, Status.STOPPED, Status.EXITED, Status.KILLED)

RULES: tuple[Rule, ...] = (
    _rule(Move.START, [Status.IDLE], [Status.ACTIVE], supervisor=SupervisorEffect.RECORD),
    _rule(Move.RESUME, [Status.PAUSED], [Status.ACTIVE], supervisor=SupervisorEffect.RECORD),
    # A step parked by the pause already marked the node paused in its own transaction.
    _rule(Move.PARK, [Status.ACTIVE, Status.PAUSED], [Status.PAUSED], closes=Closes.STEP),
    _rule(Move.END, [Status.ACTIVE], [Status.EXITED, Status.COMPLETED, Status.STOPPED],
          closes=Closes.RUN),
    _rule(Move.ABORT, [Status.ACTIVE], [Status.EXITED], closes=Closes.OPEN_ROWS),
    _rule(Move.HEAL, [Status.ACTIVE], [Status.PAUSED, Status.EXITED],
          closes=Closes.OPEN_STEPS, supervisor=SupervisorEffect.CLEAR),
    _rule(Move.INTERRUPT, [Status.ACTIVE, Status.PAUSED], [Status.PAUSED],
          closes=Closes.OPEN_STEPS),
    # Idle counts only with a live session (a supervisor still booting): the verb checks.
    _rule(Move.KILL, [Status.ACTIVE, Status.PAUSED, Status.IDLE], [Status.KILLED]),
    _rule(Move.REARM, SETTLED, [Status.IDLE]),
    _rule(Move.DISARM, [Status.IDLE], _SETTLED_ORDER),
    _rule(Move.RETIRE, [*SETTLED, Status.IDLE], [Status.RETIRED]),
    _rule(Move.UNRETIRE, [Status.RETIRED], [*_SETTLED_ORDER, Status.IDLE]),
    _rule(Move.VANISH, [*SETTLED, Status.IDLE, Status.RETIRED], [Status.MISSING]),
    _rule(Move.RECOVER, [Status.MISSING], [*_SETTLED_ORDER, Status.IDLE, Status.RETIRED]),
)
"""The legal node moves. Anything not listed here is refused."""

_BY_MOVE: Mapping[Move, Rule] = {r.move: r for r in RULES}


def rule_of(move: Move) -> Rule:
    """The table row of ``move``."""
    return _BY_MOVE[move]


def moves_from(current: Status) -> tuple[Move, ...]:
    """The moves legal from ``current``, in table order."""
    return tuple(r.move for r in RULES if current in r.sources)


def refusal(move: Move, current: Status | None, target: Status | None = None) -> str | None:
    """Why ``move`` from ``current`` (to ``target``, or the rule's default) is illegal, or
    None when it is legal. ``current`` None is an unregistered node. The text names the
    current status, what the move needs and the moves allowed from here."""
    rule = rule_of(move)
    if current is None:
        return f"the node is not registered; {move.value} needs a registered node"
    if current not in rule.sources:
        allowed = ", ".join(m.value for m in moves_from(current)) or "none"
        needs = " or ".join(sorted(s.value for s in rule.sources))
        return (f"the node is {current.value}; {move.value} needs {needs} "
                f"(moves allowed from {current.value}: {allowed})")
    if target is not None and target not in rule.targets:
        lands = ", ".join(s.value for s in rule.targets)
        return f"{move.value} cannot land on {target.value}; it lands on {lands}"
    return None


class IllegalMove(FractalError):
    """A move the table does not allow from the node's current status.

    ``current`` is None for an unregistered node; ``allowed`` lists the moves legal from
    ``current``.
    """

    def __init__(self, node: str, move: Move, current: Status | None,
                 target: Status | None = None) -> None:
        self.node = node
        self.move = move
        self.current = current
        self.target = target
        self.allowed = moves_from(current) if current is not None else ()
        why = refusal(move, current, target) or "the move is legal"
        super().__init__(f"node {node}: {why}")


def land(move: Move, current: Status | None, target: Status | None = None, *,
         node: str = "node") -> Status:
    """The status ``move`` lands on from ``current``: ``target`` when given, else the
    rule's first target. Raises IllegalMove (naming ``node``) when the table refuses it."""
    if refusal(move, current, target) is not None:
        raise IllegalMove(node, move, current, target)
    return target if target is not None else rule_of(move).targets[0]
