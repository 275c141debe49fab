"""``fractal commit``: resolve the node, label the commit, run the pipeline, record the event.

A user node (the tree's root) only accepts ``--init``. The subject is ``<branch>: iteration
<run>.<iter> (<message>)``, or ``<branch>: init (<message>)`` with ``--init``. The run and
iteration come from the loop variables the agent inherits (``RUN_ID``, ``ITER``,
``ITER_ID``, ``STEP_ID``; used only when ``NODE_BRANCH``, if set, names this node),
otherwise from the node's open run and its last iteration. An operator committing by hand
while no run is open is not the agent: the subject is ``<branch>: operator (<message>)``
and the event carries no run. ``--init`` is the baseline: once the branch has one, a second
``--init`` with something to commit is refused (with nothing to commit it stays a no-op). The
pipeline itself lives in ``fractal.workspace.commit``; this module only reads config and
lineage and writes the ``commit`` event row (sha in its metadata).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.config import normalise_scope
from fractal.domain.sandbox import Mode, decide, mode_of
from fractal.errors import ConfigError, FractalError, InvalidValue
from fractal.lifecycle.context import Context
from fractal.procs.confine import CONFINED_ENV, confined_argv
from fractal.tree import NodePaths, Tree
from fractal.workspace import git
from fractal.workspace.commit_types import CommitMode, CommitOutcome, CommitRequest, ScriptRunner
from fractal.workspace.nodedir import read_config

__all__ = ["CommitMode", "CommitResult", "Lineage", "commit_work", "compose_subject",
           "resolve_lineage", "validate_message"]

_ITERATION_WORD = re.compile(r"iteration\b", re.IGNORECASE)


@dataclass(frozen=True)
class Lineage:
    """Who commits, and in which run/iteration/step (ids are None when unknown).

    ``iteration`` is the 1-based number within the run; ``iter_id`` and ``step_id`` are
    row ids. ``actor`` is ``agent`` inside the loop, ``operator`` otherwise.
    """

    run_id: int | None = None
    iteration: int | None = None
    iter_id: int | None = None
    step_id: int | None = None
    actor: str = "operator"
    #: The node has run, but no run is open: an operator's hand commit between runs.
    between_runs: bool = False


@dataclass(frozen=True)
class CommitResult:
    """The node that committed, the pipeline's outcome, the lineage and the event row id."""

    branch: str
    outcome: CommitOutcome
    lineage: Lineage
    event_id: int | None = None


MAX_MESSAGE = 200  # characters of the summary that becomes the commit subject


def validate_message(message: str | None, branch: str) -> str:
    """Return the stripped one-line summary, or raise InvalidValue.

    Refused: an empty message, one spanning several lines, and
    one starting with the branch name or the word ``iteration`` (the pipeline adds both).
    """
    text = (message or "").strip()
    example = 'e.g. fractal commit "add tokenizer for string literals"'
    if not text:
        raise InvalidValue(f"the commit message is empty; give a bare lowercase summary, {example}")
    if any(ch in text for ch in "\r\n") or not text.isprintable():
        raise InvalidValue("the commit message must be one line of text (a bare lowercase "
                           f"summary), {example}")
    if len(text) > MAX_MESSAGE:
        raise InvalidValue(f"the commit message is {len(text)} characters; keep the summary "
                           f"under {MAX_MESSAGE} (details belong in the code), {example}")
    if text.lower().startswith(branch.lower()) or _ITERATION_WORD.match(text):
        raise InvalidValue(f"the commit message {text!r} starts with the branch name or "
                           f"'iteration'; give only the summary (the subject '{branch}: "
                           f"iteration <run>.<iter> (...)' is composed for you), {example}")
    return text


def compose_subject(branch: str, message: str, *, init: bool, run_id: int | None,
                    iteration: int | None, operator: bool = False) -> str:
    """``<branch>: init (<message>)``, ``<branch>: operator (<message>)`` (a hand commit
    outside any run) or ``<branch>: iteration <run>.<iter> (<message>)``."""
    if init:
        return f"{branch}: init ({message})"
    if operator:
        return f"{branch}: operator ({message})"
    return f"{branch}: iteration {run_id}.{iteration if iteration is not None else 0} ({message})"


def _int(env: Mapping[str, str], key: str) -> int | None:
    text = env.get(key, "").strip()
    return int(text) if text.isdigit() else None


def _last_iteration(tree: Tree, branch: str, run_id: int) -> tuple[int | None, int | None]:
    """``(iter, iter_id)`` of the run's newest iteration, or ``(None, None)``."""
    from fractal.store import reader  # deferred: start-up cost (11 modules)

    rows = [r for r in reader.activity(tree.db_path, [branch], None)
            if r.kind == "iteration" and r.run_id == run_id and r.iter is not None]
    if not rows:
        return None, None
    newest = max(rows, key=lambda r: (r.iter or 0, r.iter_id or 0))
    return newest.iter, newest.iter_id


def resolve_lineage(tree: Tree, branch: str, env: Mapping[str, str]) -> Lineage:
    """The caller's lineage: the exported loop variables, else the node's latest run.

    Loop variables count only when ``RUN_ID`` is set and ``NODE_BRANCH`` (if set) is
    ``branch``. Returns a Lineage with ``run_id`` None when the node never ran, and one
    with ``between_runs`` (no run) when its runs are all closed.
    """
    run_id = _int(env, "RUN_ID")
    if run_id is not None and env.get("NODE_BRANCH", branch) in ("", branch):
        iteration, iter_id = _int(env, "ITER"), _int(env, "ITER_ID")
        if iteration is None:
            iteration, iter_id = _last_iteration(tree, branch, run_id)
        return Lineage(run_id, iteration, iter_id, _int(env, "STEP_ID"), actor="agent")
    from fractal.store import reader  # deferred: start-up cost (11 modules)

    run = reader.last_run(tree.db_path, branch)
    if run is None:
        return Lineage()
    if run.ended_at is not None:
        return Lineage(between_runs=True)
    iteration, iter_id = _last_iteration(tree, branch, run.run_id)
    return Lineage(run.run_id, iteration, iter_id)


def _node_settings(paths: NodePaths) -> tuple[tuple[str, ...], bool]:
    """``(canonical scope roots, local)`` from the node's config.json.

    Raises ConfigError for a missing or malformed file or a wrong-typed key, InvalidValue
    for an absolute or ``..`` scope root.
    """
    raw = read_config(paths.config_path)
    scope, local = raw.get("scope"), raw.get("local")
    source = str(paths.config_path)
    if scope is not None and not (isinstance(scope, list)
                                  and all(isinstance(item, str) for item in scope)):
        raise ConfigError(["scope: must be a list of relative paths"], source)
    if local is not None and not isinstance(local, bool):
        raise ConfigError(["local: must be true or false"], source)
    return normalise_scope(scope or []), bool(local)


def _target(ctx: Context) -> tuple[Tree, NodePaths]:
    tree = ctx.tree
    worktree = ctx.top if ctx.top is not None else git.toplevel(ctx.cwd)
    branch = git.current_branch(worktree)
    if branch is None or not tree.owns(branch) \
            or tree.worktree_of(branch).resolve() != worktree.resolve():
        raise FractalError(f"{worktree} is not the worktree of a node of tree {tree.root} "
                           f"(branch {branch or '(detached)'}); run `fractal commit` in a "
                           "node's worktree or pass --path")
    ctx.authorize("commit", branch)
    return tree, tree.node(branch)


SEED_SUBJECT = "init (node seed)"
"""How the commit a spawn makes ends (``<branch>: init (node seed)``): not a baseline."""


def has_baseline(worktree: Path, branch: str) -> bool:
    """Tell whether ``branch`` already holds a baseline commit: one whose subject is
    ``<branch>: init (...)``, the spawn's own seed commit aside."""
    prefix = f"{branch}: init ("
    out = git.run_git(["log", "--format=%s", "--fixed-strings", f"--grep={prefix}",
                       "--max-count=50", branch, "--"], worktree, check=False).stdout
    return any(line.startswith(prefix) and line != f"{branch}: {SEED_SUBJECT}"
               for line in out.splitlines())


def _refuse_second_baseline(paths: NodePaths) -> None:
    """Refuse ``--init`` when the branch has its baseline and there is work to commit."""
    worktree = paths.worktree
    if not git.changed_paths(worktree) and git.run_git(
            ["diff", "--cached", "--quiet"], worktree, check=False).returncode == 0:
        return  # nothing to commit: the pipeline's no-op says so
    if has_baseline(worktree, paths.branch):
        raise FractalError(f"{paths.branch} already has its baseline commit (`git log --grep "
                           f"'{paths.branch}: init ('` shows it); commit further work without "
                           "--init (`fractal commit MESSAGE`)")


def _runner(argv: Sequence[str], cwd: Path, env: Mapping[str, str],
            timeout: float | None) -> tuple[int, str]:
    from fractal.procs.commands import run_capture  # deferred: start-up cost (7 modules)

    return run_capture(argv, cwd=cwd, env=env, timeout=timeout)


def _adopt_private(paths: NodePaths) -> None:
    """Adopt what a program in the node's sandbox wrote into its private object
    directory (the commit its hooks ran for) into the shared store, every object checked,
    as before each relayed command (``lifecycle.adopting``; its launch lives: a snapshot),
    so this verb's git reads it next. Raises FractalError when the branch then needs an
    object adoption refused or the store lacks (the text says what to do)."""
    from fractal.domain.states import Status  # deferred: only a confined commit (1 module)
    from fractal.lifecycle.adopting import take_objects  # deferred: start-up cost, as above

    taken = take_objects(paths.tree, paths.branch, Status.ACTIVE, "commit",
                         always_check=False)
    if taken.refusal:
        raise FractalError(taken.refusal)


def _confined_runner(paths: NodePaths) -> ScriptRunner:
    """The runner of a commit a sandboxed agent asked for through its relay: its
    ``git commit`` (with the user's hooks), ``scripts/lint.sh`` and push each run in the
    node's sandbox (``procs.confine``), without the node's relay (the relay keeps its
    token out of this verb's environment, so no program it starts can pose as the node's
    agent: a ``fractal`` there finds no tree); the objects each wrote are adopted when it
    ends (``_adopt_private``)."""
    def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str],
            timeout: float | None) -> tuple[int, str]:
        done = _runner(confined_argv(paths, env, argv, cwd, relay=None), cwd, env, timeout)
        _adopt_private(paths)
        return done

    return run


def _sandboxed_lint(paths: NodePaths) -> ScriptRunner:
    """The runner of a child node's ``scripts/lint.sh`` in a commit its agent did not ask
    for (the operator's ``fractal commit`` in the node's worktree): the script is the
    node's own, written by its agent, so it runs in the node's sandbox (no relay: it has
    no launch's token) unless the tree says ``"sandbox": "off"``. Where the tree wants a
    sandbox and none can run, the script does not run: FractalError, naming the fixes."""
    def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str],
            timeout: float | None) -> tuple[int, str]:
        # deferred: only a node with a lint.sh probes bubblewrap (1 module)
        from fractal.procs.sandbox import missing

        setting = mode_of(paths.tree.root_config())
        if setting is Mode.OFF:
            return _runner(argv, cwd, env, timeout)
        verdict = decide(setting, missing()) if isinstance(setting, Mode) else None
        if verdict is None or not verdict.sandboxed:
            why = verdict.refusal if verdict is not None else str(setting)
            raise FractalError(f"{paths.branch}'s scripts/lint.sh runs only in its sandbox, "
                               f"and {why}; or read the script and commit with "
                               "`fractal commit --force MESSAGE` (no lint)")
        return _runner(confined_argv(paths, env, argv, cwd, relay=None), cwd, env, timeout)

    return run


def commit_work(ctx: Context, message: str | None, *, mode: CommitMode = CommitMode.ITERATION,
                env: Mapping[str, str] | None = None) -> CommitResult:
    """Run ``fractal commit`` for the node whose worktree holds ``ctx.cwd``; inside a
    node's loop only that node's own worktree (``fractal.domain.authority``: Refused).

    ``message`` is the bare summary (ignored with ``CommitMode.CHECK``); ``env`` (default
    ``os.environ``) supplies the loop variables. Records a ``commit`` event (metadata: the
    sha) when a commit lands; a failure to record it is a warning, never a lost commit.
    Raises FractalError (not a node worktree, root without ``--init``, no run to label the
    commit with), InvalidValue (message), ConfigError, and the pipeline's CommitError family.
    """
    from fractal.workspace.commit import run_pipeline  # deferred: start-up cost (21 modules)
    from fractal.workspace.wiki import refresh_wikis  # deferred: start-up cost (2 modules)

    environ = os.environ if env is None else env
    tree, paths = _target(ctx)
    branch = paths.branch
    if branch == tree.root and mode is not CommitMode.INIT:
        raise FractalError(f"{branch} is the tree's root (user node): it only takes the "
                           "baseline commit `fractal commit --init MESSAGE`; commit work from "
                           "a node's worktree")
    scope, local = _node_settings(paths)
    confined = bool(environ.get(CONFINED_ENV))  # asked for by the node's sandboxed agent
    lineage = Lineage()
    subject = ""
    if mode is not CommitMode.CHECK:
        text = validate_message(message, branch)
        lineage = resolve_lineage(tree, branch, environ)
        if mode is CommitMode.INIT:
            _refuse_second_baseline(paths)
        if mode is not CommitMode.INIT and lineage.run_id is None \
                and not lineage.between_runs:
            raise FractalError(f"{branch} has no run yet, so there is no iteration to label "
                               "this commit with; start the node, or make a baseline commit "
                               "with `fractal commit --init MESSAGE`")
        subject = compose_subject(branch, text, init=mode is CommitMode.INIT,
                                  run_id=lineage.run_id, iteration=lineage.iteration,
                                  operator=lineage.between_runs)
    script_env = {**environ, "NODE_DIR": str(paths.node_dir),
                  "WORKTREE_DIR": str(paths.worktree), "NODE_BRANCH": branch,
                  "_NODE": str(paths.node_dir)}
    request = CommitRequest(worktree=paths.worktree, branch=branch, node_dir=paths.node_dir,
                            subject=subject, mode=mode, scope=scope, local=local,
                            script_env=script_env,
                            author=None if branch == tree.root else branch,
                            programs=not confined)
    recorded: list[int] = []
    problems: list[str] = []

    def record(sha: str) -> None:
        from fractal.store.ledger import Ledger  # deferred: start-up cost (21 modules)

        try:
            recorded.append(Ledger(tree.db_path).add_event(
                branch, "commit", actor=lineage.actor, status="completed", metadata=sha,
                run_id=lineage.run_id, iter_id=lineage.iter_id, step_id=lineage.step_id))
        except FractalError as exc:
            problems.append(f"the commit landed but its event was not recorded: {exc}")

    refresh_wikis(paths.worktree, paths.node_dir, mode)  # the wiki step: before lint
    runner = _confined_runner(paths) if confined else _runner
    own_lint = confined or branch == tree.root  # the root's scripts no agent writes
    outcome = run_pipeline(request, runner=runner, on_commit=record,
                           lint_runner=None if own_lint else _sandboxed_lint(paths))
    if problems:
        outcome = CommitOutcome(outcome.sha, outcome.subject, outcome.files, outcome.pushed,
                                outcome.notices, (*outcome.warnings, *problems))
    return CommitResult(branch, outcome, lineage, recorded[0] if recorded else None)
