"""A lead whose agent knows only what its prompts say, in-process on the fake clock: it
reads the commands out of the rendered tree mode, spawns two gated children with a task
file, the loop waits for them (``wait: children``) while the lead approves each gate from
the SYNC digest, and merges both once the radio feed announced their ends."""

from __future__ import annotations

import json
import os
import re

from tests.helpers import FRACTAL_BIN, git
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

LEAD_STEPS = {"01-SPAWN.md": "Split the task.",
              "02-MERGE.md": "---\nwait: children\n---\nBring the children's work back."}


def _commands(prompt: str) -> list[str]:
    """Every backticked command of a prompt that runs the loop's fractal (its path,
    ``FRACTAL_BIN``, rendered in), spelled ``fractal ...`` for the in-process CLI."""
    return ["fractal " + c for c in re.findall(rf"`{re.escape(FRACTAL_BIN)} ([^`]+)`", prompt)]


def _one(commands: list[str], start: str) -> str:
    found = [c for c in commands if c.startswith(start)]
    assert found, f"no `{start}` command in the prompt"
    return found[0]


def test_a_lead_delegates_from_its_prompts_alone(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("lead", LEAD_STEPS, "--max-iters", "1", "--max-children", "2", "--max-cost", "5",
           "--wait", "10m")
    lead_wt = t.worktree("lead")
    prompts: dict[str, str] = {}
    feeds: list[str] = []
    approved: list[str] = []
    seeded: dict[str, tuple[str, str]] = {}

    def lead(call: FakeCall) -> None:
        if call.env.get("NODE_BRANCH") != "main.lead":
            return
        commands = _commands(call.prompt)
        if "(SPAWN)" in call.label and not call.is_sync:
            prompts["spawn"] = call.prompt
            spawn = _one(commands, "fractal node init NAME")
            for name in ("div", "ops"):
                task = lead_wt / f"{name}-task.md"
                task.write_text(f"Build {name}. [stub:write={name}.txt:{name}]\n")
                argv = (spawn.replace("NAME", name).replace('"TITLE"', f"do-{name}")
                        .replace("FILE", str(task)).replace("USD", "1")
                        .replace(" N ", " 1 ")).split()[1:]
                t.cli(*argv, cwd=lead_wt)
                t.set_config(f"lead.{name}", sync=False)
                assert t.config(f"lead.{name}")["max_iters"] == 1
            # the children run while the lead's loop waits before MERGE
            t.clock.after(5, lambda: [t.run(f"lead.{n}") for n in ("div", "ops")])
        elif call.is_sync and "waiting for children" in call.label:
            prompts.setdefault("sync", call.prompt)
            # the digest announced the gates: approve each, as its line says
            bin_ = re.escape(FRACTAL_BIN)
            for name in re.findall(rf"^  - (\w+) EXECUTE \(step \d+\): review `{bin_} node "
                                   rf"diff \w+`, then `{bin_} node approve \w+`$",
                                   call.prompt, re.MULTILINE):
                pending = t.cli(*_one(commands, "fractal node pending").split()[1:],
                                cwd=lead_wt).output
                assert f"main.lead.{name}," in pending
                diff = _one(commands, "fractal node diff NAME").replace("NAME", name)
                assert f"main.lead.{name}" in t.cli(*diff.split()[1:], cwd=lead_wt).output
                t.cli(*_one(commands, "fractal node approve NAME").replace("NAME", name)
                      .split()[1:], cwd=lead_wt)
                approved.append(name)
                ndir = t.node_dir(f"lead.{name}")
                seeded[name] = ((ndir / "NODE.md").read_text(),
                                (ndir / "steps" / "02-EXECUTE.md").read_text())
                t.clock.after(1, lambda c=name: t.run(f"lead.{c}", resume=True))
        elif "(MERGE)" in call.label and not call.is_sync:
            prompts["merge"] = call.prompt
            feeds.append(t.cli("radio", "feed", "--json", cwd=lead_wt).output)
            ended = [m["node"].rsplit(".", 1)[-1] for m in json.loads(feeds[0])
                     if m["subject"].startswith("run completed")]
            merge = _one(commands, "fractal node merge NAME")
            os.environ["_NODE"] = call.env["_NODE"]  # as the lead's agent runs it
            try:
                for name in sorted(set(ended)):  # the children the feed says have ended
                    t.cli(*merge.replace("NAME", name).split()[1:], cwd=lead_wt)
                listed = t.cli(*_one(commands, "fractal node list").split()[1:],
                               cwd=lead_wt).output
                assert "main.lead.div" in listed and "main.lead.ops" in listed
                t.cli(*_one(commands, "fractal radio messages").split()[1:], cwd=lead_wt)
                for name in ("div", "ops"):
                    t.cli(*_one(commands, "fractal node retire NAME").replace("NAME", name)
                          .split()[1:], cwd=lead_wt)
            finally:
                del os.environ["_NODE"]
    t.launcher.on_spawn.append(lead)

    def child(call: FakeCall) -> None:
        """The children run nested in the lead's wait (one thread, one fake clock): each
        parks at its gate, so the lead's loop goes on waiting, and resumes once the lead
        approved it."""
        branch = call.env.get("NODE_BRANCH", "")
        if branch.startswith("main.lead.") and "(EXECUTE)" in call.label:
            t.clock.after(10, lambda: t.cli("node", "pause", branch))
    t.launcher.on_spawn.append(child)

    t.run("lead")
    assert t.status("lead") == "completed", (t.steps("lead"), t.steps("lead.div"),
                                             t.panes[0].stream.getvalue())
    # the tree mode, rendered with the lead's live caps and budget
    spawn = prompts["spawn"]
    assert f"{FRACTAL_BIN} node init NAME --title \"TITLE\" --task-file FILE --gate EXECUTE " \
           "--max-iters N --max-children 0 --max-depth 0 --max-cost 2.50" in spawn
    assert "2 more children" in spawn and "$5.00 of $5.00" in spawn
    for command in ("node start NAME", "node pending",
                    "node diff NAME", "node approve NAME", "radio feed",
                    "node merge NAME --hand-back", "node retire NAME"):
        assert f"`{FRACTAL_BIN} {command}`" in spawn, command
    assert sorted(approved) == ["div", "ops"]
    assert f"`{FRACTAL_BIN} node pending`" in prompts["sync"]
    assert f"`{FRACTAL_BIN} radio messages`" in prompts["sync"]
    # the children: task from the file, EXECUTE gated, the parent named
    for name in ("div", "ops"):
        assert f"Build {name}." in seeded[name][0]
        assert "requires_approval: true" in seeded[name][1]

    child_prompts = [c for c in t.launcher.calls
                     if c.env.get("NODE_BRANCH") == "main.lead.div"]
    assert child_prompts[0].env["PARENT_BRANCH"] == "main.lead"
    assert "You are a child of `main.lead`" in child_prompts[0].prompt
    assert "Gated steps (they wait for the parent's approval after your turn): EXECUTE." \
        in " ".join(child_prompts[0].prompt.split())
    # the loop waited; the lead learnt of the ends from its feed
    (wait,), = t.sql("SELECT metadata FROM steps WHERE node = 'main.lead' AND "
                     "step_name = 'WAIT' AND status = 'completed'")
    assert re.fullmatch(r"waited for 2 children \(\d+s\)", wait), wait  # woken, not at 10m
    merge_sync = [c.prompt for c in t.launcher.calls if c.env.get("NODE_BRANCH") == "main.lead"
                  and c.label == "SYNC before step 2 of 2 (MERGE)"]
    assert "  - div: run completed" in merge_sync[0] and "  - ops: run completed" \
        in merge_sync[0]
    subjects = [m["subject"] for m in json.loads(feeds[0])]
    assert any(s.startswith("run completed") for s in subjects), subjects
    assert sum("awaits approval" in s for s in subjects) == 2
    assert t.status("lead.div") == "retired" and t.status("lead.ops") == "retired"
    # both merged, each merge announced
    log = git(t.repo, "log", "--format=%s", "main.lead")
    assert "div" in log and "ops" in log
    assert (lead_wt / "div.txt").is_file() and (lead_wt / "ops.txt").is_file()
    notices = [s for (s,) in t.sql("SELECT subject FROM messages WHERE channel = 'outbox'")]
    assert sum("merged into main.lead" in s for s in notices) == 2, notices
