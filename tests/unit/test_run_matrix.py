"""Every way a run ends, in-process: a real supervisor over a real ledger and git
repository, driven by a fake clock and a scripted launcher (``tests/loopfakes.py``).

Each case is a node (its steps and options), how the run is steered, and the run row it
must leave; the stop-reason precedence cases put two causes in the same run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from fractal.runtime.runloop import CRASH_LOOP
from tests.helpers import git
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

def _on_first(action: Callable[[LoopTree], None]) -> Callable[[LoopTree], None]:
    """Install ``action`` to run once, when the first work step starts."""
    def install(t: LoopTree) -> None:
        done: list[bool] = []

        def hook(call: FakeCall) -> None:
            if not done and not call.is_sync:
                done.append(True)
                action(t)
        t.launcher.on_spawn.append(hook)
    return install


def _verb(*args: str) -> Callable[[LoopTree], None]:
    return _on_first(lambda t: t.cli(*args))


def _setup_fails(t: LoopTree) -> None:
    (t.node_dir("n") / "scripts" / "setup.sh").write_text("echo broken setup >&2\nexit 7\n")


def _not_utf8(t: LoopTree) -> None:
    (t.node_dir("n") / "steps" / "02-B.md").write_bytes(b"caf\xe9 au lait\n")


def _broken_config(t: LoopTree) -> None:
    (t.node_dir("n") / "config.json").write_text("{not json")


def _exec_fails(t: LoopTree) -> None:
    t.launcher.refuse = "exec failed"


@dataclass(frozen=True)
class End:
    """A run to drive and the (status, exit_code, metadata) its run row must hold."""

    steps: dict[str, str]
    opts: tuple[str, ...]
    run: tuple[object, ...]
    node: str | None = None  # the node's status (default: the run's)
    prepare: Callable[[LoopTree], None] | None = None
    exit_code: int = 0  # the supervisor's own exit code
    iterations: int | None = None


ONE = {"01-A.md": "a [stub:cost=0.01]\n"}
PYFAIL = "echo 'ERROR: still broken'; exit 1"

MATRIX: dict[str, End] = {
    "max iterations": End(ONE, ("--max-iters", "2"),
                          ("completed", 0, "Reached max iterations (2)"), iterations=2),
    "final iteration failed": End({"01-A.md": "[stub:fail=2]"},
                                  ("--max-iters", "1", "--step-retries", "0"),
                                  ("exited", 1, "Reached max iterations (1); final iteration "
                                   "failed"), iterations=1),
    "stop": End(ONE, ("--max-iters", "5"), ("stopped", 0, "Stopped by request"),
                prepare=_verb("node", "stop", "n"), iterations=1),
    "finish": End({**ONE, "02-B.md": "b"}, ("--max-iters", "5"),
                  ("completed", 0, "Finished by request"), prepare=_verb("node", "finish", "n"),
                  iterations=1),
    "finish withdrawn": End(ONE, ("--max-iters", "2"),
                            ("completed", 0, "Reached max iterations (2)"),
                            prepare=_on_first(lambda t: (t.cli("node", "finish", "n"),
                                                         t.cli("node", "finish", "n",
                                                               "--cancel"))),
                            iterations=2),
    "run wall": End({"01-SLOW.md": "[stub:sleep=30]"}, ("--timeout", "2s"),
                    ("exited", 1, "Timed out at iteration 1.1 (2s total)"), iterations=1),
    "setup crash loop": End(ONE, (), ("exited", 1, f"setup failed x{CRASH_LOOP}"),
                            prepare=_setup_fails, iterations=CRASH_LOOP),
    "no step files": End({}, (), ("exited", 1, f"no step files x{CRASH_LOOP}"),
                         iterations=CRASH_LOOP),
    "step file not UTF-8": End({"01-A.md": "ok"}, (),
                               ("exited", 1, "step file 02-B.md is not valid UTF-8 (byte 3: "
                                "invalid continuation byte)"), prepare=_not_utf8, exit_code=1,
                               iterations=0),
    "broken config": End(ONE, (), ("exited", 1, None), prepare=_broken_config, exit_code=1,
                         iterations=0),
    "agent cannot start": End(ONE, ("--max-iters", "1", "--step-retries", "0"),
                              ("exited", 1, "Reached max iterations (1); final iteration "
                               "failed"), prepare=_exec_fails, iterations=1),
    "budget landing": End({"01-ONE.md": "one [stub:cost=0.3]", "02-TWO.md": "two "
                           "[stub:cost=0.3]"}, ("--max-cost", "1", "--step-timeout", "1m"),
                          ("exited", 0, "subtree cost budget reached (spent $1.2000 >= $1 "
                           "max)"), iterations=2),
    "exit check passed": End(ONE, ("--max-iters", "5", "--exit-check", "true"),
                             ("completed", 0, "exit check passed (true)"), iterations=1),
    "no progress": End(ONE, ("--max-iters", "5", "--exit-check", PYFAIL),
                       ("exited", 1, "no progress: ERROR: still broken"), iterations=2),
    # two causes in one run: the higher-ranked one names the end
    "exit check passed beats max iterations": End(
        ONE, ("--max-iters", "1", "--exit-check", "true"),
        ("completed", 0, "exit check passed (true)"), iterations=1),
    "stop beats max iterations": End(ONE, ("--max-iters", "1"),
                                     ("stopped", 0, "Stopped by request"),
                                     prepare=_verb("node", "stop", "n"), iterations=1),
    "no progress beats max iterations": End(
        ONE, ("--max-iters", "2", "--exit-check", PYFAIL),
        ("exited", 1, "no progress: ERROR: still broken"), iterations=2),
    "stop beats no progress": End(
        ONE, ("--max-iters", "5", "--exit-check", PYFAIL), ("stopped", 0, "Stopped by request"),
        prepare=_on_first(lambda t: t.launcher.on_spawn.append(
            lambda c: t.cli("node", "stop", "n") if t.launcher.calls.index(c) == 1 else None)),
        iterations=2),
    "budget beats max iterations": End(
        {"01-ONE.md": "one [stub:cost=0.6]", "02-TWO.md": "two [stub:cost=0.6]"},
        ("--max-cost", "1", "--max-iters", "1", "--step-timeout", "1m"),
        ("exited", 0, "subtree cost budget reached (spent $1.2000 >= $1 max)"), iterations=1),
    "run wall beats max iterations": End(
        {"01-SLOW.md": "[stub:sleep=30]"}, ("--timeout", "2s", "--max-iters", "1"),
        ("exited", 1, "Timed out at iteration 1.1 (2s total)"), iterations=1),
}


@pytest.mark.parametrize("case", list(MATRIX), ids=list(MATRIX))
def test_how_a_run_ends(loop_tree: LoopTree, case: str) -> None:
    end, t = MATRIX[case], loop_tree
    t.node("n", end.steps, "--no-sync", *end.opts)
    if end.prepare is not None:
        end.prepare(t)
    assert t.run("n") == end.exit_code
    status, code, reason = t.run_row("n")
    expected_status, expected_code, expected_reason = end.run
    assert (status, code) == (expected_status, expected_code)
    if expected_reason is not None:
        assert reason == expected_reason
    assert t.status("n") == (end.node or expected_status)
    if end.iterations is not None:
        assert len(t.iterations("n")) == end.iterations
    # every run leaves no open row behind, and every run posts its end notice
    assert t.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert t.sql("SELECT COUNT(*) FROM iterations WHERE ended_at IS NULL") == [(0,)]
    notices = [s[:80] for (s,) in t.sql("SELECT subject FROM messages WHERE node = 'main.n'")]
    assert notices == [f"run {status}: {reason}"[:80]]


def test_a_crash_of_the_loop_itself_is_recorded_and_still_commits(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("n", {"01-A.md": "[stub:write=left.txt:work]", "02-B.md": "b"}, "--no-sync")

    def boom(call: FakeCall) -> None:
        if "(B)" in call.label:
            raise RuntimeError("boom")
    t.launcher.on_spawn.append(boom)
    assert t.run("n") == 1
    assert t.run_row("n") == ("exited", 1, "Loop exited abnormally: RuntimeError: boom")
    assert t.status("n") == "exited"
    assert t.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert git(t.repo, "show", "main.n:left.txt") == "work"
    subjects = git(t.repo, "log", "--format=%s", "main.n").splitlines()
    assert subjects[0].endswith("(crashed)")


# -- moved from tests/e2e (the same assertions, in-process) --------------------------------

def test_node_runs_iterations_and_sees_the_variables(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("worker", {"01-WRITE.md": "Write. [stub:append=notes.txt:iteration $ITER_REF] "
                                     "[stub:cost=0.01]\n",
                      "02-CHECK.md": "---\ntimeout: 1m\n---\nCheck it.\n"},
           "--max-iters", "2", "--no-sync", "--title", "writes notes")
    assert t.run("worker") == 0
    ((run_id,),) = t.sql("SELECT run_id FROM runs")
    assert t.iterations("worker") == [(1, "completed", 0, ""), (2, "completed", 0, "")]
    assert t.sql("SELECT step, step_name, status, exit_code, cost FROM steps ORDER BY "
                 "step_id") == [(1, "WRITE", "completed", 0, 0.01),
                                (2, "CHECK", "completed", 0, None)] * 2
    notes = git(t.repo, "show", "main.worker:notes.txt")
    assert notes.splitlines() == [f"iteration {run_id}.1", f"iteration {run_id}.2"]
    assert f"main.worker: iteration {run_id}.1 (auto)" in git(
        t.repo, "log", "--format=%s", "main.worker").splitlines()
    env = t.launcher.calls[1].env
    assert env["STEP_LABEL"] == "step 2 of 2 (CHECK)"
    assert env["ITER_LABEL"] == "1 of 2"
    assert env["ITER_REF"] == f"{run_id}.1"
    assert env["STEP_LIMIT_SECONDS"] == "60"
    assert env["RUN_ID"] == str(run_id)
    assert t.launcher.calls[1].cwd == t.worktree("worker")
    assert "Do the step." in t.launcher.calls[1].prompt


def test_failed_step_fails_iteration_and_books_the_rest(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {
        "01-A.md": "[stub:write=work.txt:partial]\n",
        "02-B.md": "[stub:fail=3]\n",
        "03-C.md": "never runs\n",
    }
    t.node("flaky", steps, "--max-iters", "1", "--no-sync", "--step-retries", "1",
           "--step-retry-backoff", "1s")
    t.run("flaky")
    assert t.status("flaky") == "exited"
    rows = t.steps("flaky")
    assert rows[0] == ("A", "completed", 0, "")
    assert rows[1][:3] == ("B", "failed", 3) and rows[1][3].startswith("agent error (exit 3)")
    assert rows[2][:3] == ("B", "failed", 3) and rows[2][3].endswith("; retry; unpriced")
    assert rows[3] == ("C", "stopped", 0, "failed on B")
    assert t.sql("SELECT status, exit_code, metadata FROM runs")[0] == (
        "exited", 1, "Reached max iterations (1); final iteration failed")
    it = t.sql("SELECT status, exit_code, metadata FROM iterations")[0]
    assert it[:2] == ("failed", 1) and it[2].startswith("failed on B")
    err_dir = t.node_dir("flaky") / "tmp" / "err"
    names = sorted(p.name for p in err_dir.iterdir())
    assert len(names) == 2 and names[1].endswith("-2.err")
    assert git(t.repo, "show", "main.flaky:work.txt") == "partial"
    body = git(t.repo, "log", "-1", "--format=%B", "main.flaky")
    assert "Steps not run: C" in body
    # the retry waited its backoff on the clock
    first, second = (c for c in t.launcher.calls if "(B)" in c.label)
    assert second.started_at - first.started_at >= 1.0


def test_every_exited_run_posts_a_notice(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("sad", {"01-A.md": "[stub:fail=2]"}, "--no-sync", "--max-iters", "1",
           "--step-retries", "0")
    t.run("sad")
    assert t.status("sad") == "exited"
    import json

    rows = json.loads(t.cli("radio", "messages", "--node", "sad", "--channel", "outbox",
                            "--json").output)
    assert [(r["priority"], r["subject"]) for r in rows] == [
        (7, "run exited: Reached max iterations (1); final iteration failed")]
    reason, spend = rows[0]["data"].splitlines()[:2]
    assert reason == "Reached max iterations (1); final iteration failed"
    assert spend.startswith("run 1 spent ")


def test_setup_crash_loop_ends_the_run(loop_tree: LoopTree) -> None:
    t = loop_tree
    ndir = t.node("nosetup", {"01-A.md": "x"}, "--no-sync")
    (ndir / "scripts" / "setup.sh").write_text("echo broken setup >&2\nexit 7\n")
    t.run("nosetup")
    assert t.status("nosetup") == "exited"
    assert t.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("exited", 1, "setup failed x3")]
    metas = [m for (m,) in t.sql("SELECT metadata FROM iterations")]
    assert len(metas) == 3 and all("broken setup" in m for m in metas)
    assert "broken setup" in (ndir / "setup.log").read_text()


def test_step_file_not_utf8_ends_the_run_naming_the_file(loop_tree: LoopTree) -> None:
    t = loop_tree
    ndir = t.node("badbytes", {"01-A.md": "ok"}, "--no-sync")
    (ndir / "steps" / "02-B.md").write_bytes(b"caf\xe9 au lait\n")
    t.run("badbytes")
    assert t.status("badbytes") == "exited"
    status, code, meta = t.sql("SELECT status, exit_code, metadata FROM runs")[0]
    assert (status, code) == ("exited", 1)
    assert "02-B.md" in meta and "UTF-8" in meta


def test_missing_agent_override_is_a_failed_launch(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "---\nagent: /nonexistent/agent-binary\n---\nhi\n"}
    t.node("noagent", steps, "--no-sync", "--max-iters", "1", "--step-retries", "0")
    t.run("noagent")
    assert t.status("noagent") == "exited"
    (name, status, code, meta), = t.steps("noagent")
    assert (name, status, code) == ("A", "failed", 127)
    assert "/nonexistent/agent-binary" in meta
    assert t.launcher.calls == []  # refused before any launch
