"""The template variables a prompt sees and the environment an agent gets.

The user-facing table is docs/loop.md, "Template variables and the environment".
Static variables are pinned
at boot in the exported environment, but re-derived per step from live config in the
prompt (only DETACHED_MODE and META_MODE stay boot-pinned there too). Run-scoped
variables are refreshed for every step. The lineage ids (RUN_ID, ITER, ITER_ID,
STEP_ID) are always exported, blank when unset, so they mask inherited values.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractal.domain.spawncaps import child_caps


@dataclass(frozen=True)
class StaticFacts:
    """Paths and node-level settings: the static variables (the table is in
    docs/loop.md, "Template variables and the environment").

    ``scope`` holds absolute scope roots; ``max_*`` are None when unlimited.
    """

    repo_dir: str
    project_dir: str
    worktree_dir: str
    node_dir: str
    plans_dir: str
    memory_dir: str
    wiki_dir: str
    branch: str
    scope: tuple[str, ...]
    max_depth: int | None
    max_children: int | None
    max_descendants: int | None
    meta_target: str | None
    #: The parent's branch ('' for the root, whose parent is the operator).
    parent: str = ""
    #: The absolute path of the run's ``fractal`` command (``FRACTAL_BIN``).
    fractal_bin: str = "fractal"


@dataclass(frozen=True)
class TreeFacts:
    """What the tree protocol tells a node: its live direct children, its caps (None:
    unlimited), its run ceiling and the subtree's spend so far (USD), its gated steps."""

    children: int
    max_children: int | None
    max_depth: int | None
    max_cost: float | None
    spent: float
    gated: tuple[str, ...]


@dataclass(frozen=True)
class StepFacts:
    """Everything run-scoped about one launch; seconds for durations, epoch seconds for
    deadlines, USD for money, None for "not set"."""

    run_id: int | None
    iteration: int | None
    iter_id: int | None
    step_id: int | None
    step_label: str
    iter_label: str
    iter_ref: str
    iter_timestamp: str
    time_budget: str
    cost_budget: str
    continue_mode: bool
    resume_mode: bool
    reserve_mode: bool
    detached_mode: bool
    meta_mode: bool
    agent_command: str
    max_cost: float | None
    max_iter_cost: float | None
    max_step_cost: float | None
    step_budget: float | None
    run_timeout: int | None
    iter_timeout: int | None
    step_timeout: int | None
    interval: int | None
    step_limit: float | None
    run_end_epoch: float | None
    iter_end_epoch: float | None
    step_model: str | None
    step_detached: bool


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _limit(value: int | None) -> str:
    return "-1" if value is None else str(value)


def _opt(value: object | None) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.4f}".rstrip("0")
    return str(value)


def static_variables(facts: StaticFacts) -> dict[str, str]:
    """The static variables (REPO_DIR ... META_TARGET) except the two boot-pinned mode flags."""
    return {
        "REPO_DIR": facts.repo_dir,
        "PROJECT_DIR": facts.project_dir,
        "WORKTREE_DIR": facts.worktree_dir,
        "NODE_DIR": facts.node_dir,
        "SCOPE_DIR": " ".join(facts.scope),
        "PLANS_DIR": facts.plans_dir,
        "MEMORY_DIR": facts.memory_dir,
        "WIKI_DIR": facts.wiki_dir,
        "CURRENT_BRANCH": facts.branch,
        "MAX_DEPTH": _limit(facts.max_depth),
        "MAX_CHILDREN": _limit(facts.max_children),
        "MAX_DESCENDANTS": _limit(facts.max_descendants),
        "META_TARGET": facts.meta_target or "",
        "PARENT_BRANCH": facts.parent,
        "FRACTAL_BIN": facts.fractal_bin,
    }


def may_spawn(max_children: int | None, max_depth: int | None) -> bool:
    """A node may spawn while both caps allow a child (None: unlimited)."""
    return (max_children is None or max_children > 0) and (max_depth is None or max_depth > 0)


def tree_variables(facts: TreeFacts) -> dict[str, str]:
    """The tree protocol's prompt variables: CHILDREN_LEFT (children the node may still
    spawn), DEPTH_LEFT (levels below it), BUDGET_LEFT (``$1.20 of $5.00`` or
    ``unlimited``), GATED_STEPS (comma-separated, or ``none``) and SPAWN_CAPS, the cap
    options of the spawn template filled with what a child inherits
    (``domain.nodeinit.child_caps``: ``--max-children 4 --max-depth 0 --max-cost 0.93``)."""
    if facts.max_children is None:
        children = "unlimited"
    else:
        children = str(max(0, facts.max_children - facts.children))
    depth = "unlimited" if facts.max_depth is None else str(facts.max_depth)
    remaining = None if facts.max_cost is None else max(0.0, facts.max_cost - facts.spent)
    if facts.max_cost is None or remaining is None:
        budget = "unlimited"
    else:
        budget = f"${remaining:.2f} of ${facts.max_cost:.2f}"
    return {"CHILDREN_LEFT": children, "DEPTH_LEFT": depth, "BUDGET_LEFT": budget,
            "GATED_STEPS": ", ".join(facts.gated) or "none",
            "SPAWN_CAPS": child_caps(facts.max_depth, remaining, facts.max_children)}


def run_variables(step: StepFacts) -> dict[str, str]:
    """The run-scoped prompt variables, RESERVE_MODE included."""
    return {
        "STEP_LABEL": step.step_label,
        "ITER_LABEL": step.iter_label,
        "ITER_REF": step.iter_ref,
        "ITER_TIMESTAMP": step.iter_timestamp,
        "TIME_BUDGET": step.time_budget,
        "COST_BUDGET": step.cost_budget,
        "CONTINUE_MODE": _flag(step.continue_mode),
        "RESUME_MODE": _flag(step.resume_mode),
        "RESERVE_MODE": _flag(step.reserve_mode),
        "DETACHED_MODE": _flag(step.detached_mode),
        "META_MODE": _flag(step.meta_mode),
    }


def shell_word(text: str) -> str:
    """``text`` as one POSIX shell word: as it is when it holds only characters no shell
    reads specially (letters, digits, ``@%+=:,./_-``), else single-quoted."""
    if text and all(c.isascii() and (c.isalnum() or c in "@%+=:,./_-") for c in text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def prompt_variables(live: StaticFacts, step: StepFacts) -> dict[str, str]:
    """Variables for rendering a prompt: static ones from live config, plus run-scoped.
    FRACTAL_BIN is rendered as a shell word (quoted when the path needs it), so a
    prompt's `` `$FRACTAL_BIN commit ...` `` is a command an agent can run as written."""
    variables = {**static_variables(live), **run_variables(step)}
    variables["FRACTAL_BIN"] = shell_word(live.fractal_bin)
    return variables


def agent_environment(boot: StaticFacts, step: StepFacts, node_dir: str) -> dict[str, str]:
    """The loop overlay exported into the agent's environment.

    Static variables come from the boot-pinned facts; RESERVE_MODE is left out (it
    appears only in the rendered prompt); lineage ids are always present.
    """
    env = {**static_variables(boot), **run_variables(step)}
    del env["RESERVE_MODE"]
    env.update({
        "_NODE": node_dir,
        "NODE_BRANCH": boot.branch,
        "RUN_ID": _opt(step.run_id),
        "ITER": _opt(step.iteration),
        "ITER_ID": _opt(step.iter_id),
        "STEP_ID": _opt(step.step_id),
        "AGENT_COMMAND": step.agent_command,
        "MAX_COST": _opt(step.max_cost),
        "MAX_ITER_COST": _opt(step.max_iter_cost),
        "MAX_STEP_COST": _opt(step.max_step_cost),
        "STEP_BUDGET": _opt(step.step_budget),
        "RUN_TIMEOUT_SECONDS": _opt(step.run_timeout),
        "ITER_TIMEOUT_SECONDS": _opt(step.iter_timeout),
        "STEP_TIMEOUT_SECONDS": _opt(step.step_timeout),
        "INTERVAL_SECONDS": _opt(step.interval),
        "STEP_LIMIT_SECONDS": _opt(None if step.step_limit is None else int(step.step_limit)),
        "RUN_END_EPOCH": _opt(None if step.run_end_epoch is None else int(step.run_end_epoch)),
        "ITER_END_EPOCH": _opt(None if step.iter_end_epoch is None else int(step.iter_end_epoch)),
        "STEP_MODEL": step.step_model or "",
        "STEP_DETACHED": _flag(step.step_detached),
    })
    return env
