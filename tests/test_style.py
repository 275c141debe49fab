"""The suite guards the house style.

Import direction (cli/tui -> lifecycle and runtime side by side -> effects -> domain; the
control plane ``fractal/control.py`` and the process plumbing ``fractal/procs/`` sit at
effect level so the verbs and the loop share them without importing each other; the two
front ends never import each other), no import circle between files, one owner per
resource (SQL, processes, signals, tmux, printing), one definition of each shared CLI
option, every click command answering ``--help``, lazy imports for ``--help`` and the read
commands, and the module size rule (past 400 lines a module says why; past 600 it fails).
Migration drift lives in tests/integration/test_store_migrations.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.helpers import make_repo
from tests.stylecheck import (
    ROOT,
    Site,
    calls,
    covers,
    import_circles,
    import_graph,
    imports,
    modules_loaded,
    source_files,
    under,
    unexplained_function_imports,
)

FILES = source_files("fractal")
SQL = ("sqlalchemy", "sqlite3", "alembic")
EFFECTS = ("fractal/store/", "fractal/tmux.py", "fractal/procs/", "fractal/workspace/",
           "fractal/control.py")
# Programs are started only by the process, git and tmux owners, and by the demo agent
# (a separate program the loop runs, not fractal itself). Within the process plumbing
# (fractal/procs/) only processes.py spawns: commands.py runs a command through it.
SPAWNERS = ("fractal/procs/processes.py", "fractal/workspace/", "fractal/tmux.py",
            "fractal/demo/agent.py")
SIGNALLER = ("fractal/procs/processes.py",)


@dataclass(frozen=True)
class ImportRule:
    """Files in ``scope`` (minus ``exempt``) import nothing under ``forbidden`` except what
    lies under ``allowed``."""

    rule: str
    scope: tuple[str, ...]
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()
    exempt: tuple[str, ...] = ()

    def offences(self) -> list[Site]:
        return [site for path in FILES
                if covers(self.scope, path) and not covers(self.exempt, path)
                for site in imports(path)
                if under(site.name, self.forbidden) and not under(site.name, self.allowed)]


@dataclass(frozen=True)
class CallRule:
    """Files outside ``exempt`` never call a callee matching ``callees`` (fnmatch patterns
    over dotted names: ``*.send_signal`` is any receiver's ``send_signal``)."""

    rule: str
    callees: tuple[str, ...]
    exempt: tuple[str, ...]

    def offences(self) -> list[Site]:
        return [site for path in FILES if not covers(self.exempt, path)
                for site in calls(path)
                if any(fnmatchcase(site.name, pattern) for pattern in self.callees)]


IMPORT_RULES = [
    ImportRule("domain/ is pure: from fractal it imports only fractal.domain",
               ("fractal/domain/",), ("fractal",), allowed=("fractal.domain",)),
    ImportRule("effect modules never import the layers above them",
               EFFECTS, ("fractal.cli", "fractal.lifecycle", "fractal.runtime", "fractal.demo")),
    ImportRule("runtime never imports lifecycle (the loop reaches the verbs' world through "
               "fractal/control.py)", ("fractal/runtime/",), ("fractal.lifecycle", "fractal.cli")),
    ImportRule("lifecycle never imports runtime: the verbs reach processes through "
               "fractal/procs/ and the loop through the control plane; only the cli's "
               "hidden `node _run` entry starts a loop in-process",
               ("fractal/lifecycle/",), ("fractal.runtime",)),
    ImportRule("tui/ never imports cli/: what both front ends need lives below them "
               "(lifecycle/, fractal/crashlog.py)", ("fractal/tui/",), ("fractal.cli",)),
    ImportRule("cli/ reaches tui/ only through `fractal open`, the command that starts the "
               "dashboard", ("fractal/cli/",), ("fractal.tui",), exempt=("fractal/cli/open.py",)),
    ImportRule("agents never import workspace (agent homes' paths are in domain/agent/homes.py)",
               ("fractal/agents/",), ("fractal.workspace",)),
    ImportRule("the CLI speaks no SQL", ("fractal/cli/",), SQL),
    ImportRule("only store/ speaks SQL", ("fractal/",), SQL, exempt=("fractal/store/",)),
    ImportRule("only procs/processes.py, workspace/, tmux.py (and the demo agent) use subprocess",
               ("fractal/",), ("subprocess",), exempt=SPAWNERS),
    ImportRule("only tmux.py talks to tmux", ("fractal/",), ("libtmux",),
               exempt=("fractal/tmux.py",)),
    ImportRule("only procs/processes.py sends signals", ("fractal/",),
               ("os.kill", "os.killpg", "signal.pthread_kill"), exempt=SIGNALLER),
]

CALL_RULES = [
    CallRule("print() only in cli/, runtime/pane.py and the demo agent",
             ("print", "builtins.print"),
             ("fractal/cli/", "fractal/runtime/pane.py", "fractal/demo/agent.py")),
    CallRule("only procs/processes.py sends signals",
             ("os.kill", "os.killpg", "signal.pthread_kill", "*.send_signal", "*.terminate"),
             SIGNALLER),
    CallRule("only the process owners start programs",
             ("os.system", "os.popen", "os.fork", "os.forkpty", "os.posix_spawn*", "os.exec*",
              "os.spawn*"),
             SPAWNERS),
]


@pytest.mark.parametrize("rule", IMPORT_RULES, ids=lambda r: r.rule)
def test_import_rule(rule: ImportRule) -> None:
    offences = rule.offences()
    assert not offences, f"{rule.rule}:\n" + "\n".join(map(str, offences))


@pytest.mark.parametrize("rule", CALL_RULES, ids=lambda r: r.rule)
def test_call_rule(rule: CallRule) -> None:
    offences = rule.offences()
    assert not offences, f"{rule.rule}:\n" + "\n".join(map(str, offences))


def test_no_import_circle_between_files() -> None:
    """No two files of fractal/ import each other, directly or through others (imports
    inside functions count: a lazy import defers the cost, not the dependency). A circle
    is a cut made at a line count instead of where the concepts part: fold the files back
    into one module, or move what both need below them."""
    circles = import_circles(import_graph(FILES))
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}, [["a", "b"], ["c", "d"]]),
], ids=["chain", "pair", "three-and-a-tail", "two-circles"])
def test_circles_are_strongly_connected_components(graph: dict[str, set[str]],
                                                   expected: list[list[str]]) -> None:
    assert import_circles(graph) == expected


def test_the_graph_counts_lazy_imports_and_submodules() -> None:
    graph = import_graph(["fractal/store/db.py", "fractal/store/schema.py",
                          "fractal/store/connect.py", "fractal/store/engine.py"])
    assert graph["fractal/store/schema.py"] == {"fractal/store/connect.py"}  # in _upgrade
    assert graph["fractal/store/engine.py"] == {"fractal/store/connect.py", "fractal/store/db.py",
                                                "fractal/store/schema.py"}


def test_node_status_is_written_in_one_place() -> None:
    """Only ``Transitions.move`` updates the nodes table (a node changes status by a move
    of the table in ``fractal/domain/states.py``); registration inserts the first one."""
    writers = [path for path in FILES
               if any(form in (ROOT / path).read_text(encoding="utf-8")
                      for form in ("update(Node)", "UPDATE nodes SET"))]
    assert writers == ["fractal/store/transition.py"]


def test_rule_paths_exist() -> None:
    """A renamed module must not silently empty a rule's scope or widen its exemptions."""
    entries = {e for r in IMPORT_RULES for e in (*r.scope, *r.exempt)}
    entries |= {e for r in CALL_RULES for e in r.exempt}
    missing = [e for e in sorted(entries) if not any(covers((e,), f) for f in FILES)]
    assert not missing


# --- the scanner itself: it must see what the rules rely on ------------------------------

@pytest.mark.parametrize(("path", "source", "expected"), [
    ("fractal/x.py", "import a.b, c\n", ["a.b", "c"]),
    ("fractal/x.py", "def f():\n    from fractal.procs import processes\n",
     ["fractal.procs.processes"]),
    ("fractal/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sqlite3\n",
     ["typing.TYPE_CHECKING", "sqlite3"]),
    ("fractal/store/ledger.py", "from . import rows\n", ["fractal.store.rows"]),
    ("fractal/store/ledger.py", "from ..errors import StoreError\n",
     ["fractal.errors.StoreError"]),
    ("fractal/store/__init__.py", "from .. import tmux\n", ["fractal.tmux"]),
    ("fractal/x.py", "import importlib\nimportlib.import_module('fractal.cli')\n",
     ["importlib", "fractal.cli"]),
    ("fractal/x.py", "text = 'import subprocess'  # import os\n", []),
], ids=["plain", "in-function", "type-checking", "relative", "relative-up", "relative-init",
        "import-module", "strings-and-comments"])
def test_scanner_finds_imports(path: str, source: str, expected: list[str]) -> None:
    assert [site.name for site in imports(path, source)] == expected


@pytest.mark.parametrize(("source", "expected"), [
    ("class A:\n    def f(self) -> None:\n        print('x')\n", ["print"]),
    ("import os\nos.killpg(1, 9)\n", ["os.killpg"]),
    ("self.popen.send_signal(2)\n", ["self.popen.send_signal"]),
    ("get().send_signal(2)\n", ["*.send_signal", "get"]),
], ids=["nested-print", "killpg", "method", "call-receiver"])
def test_scanner_finds_calls(source: str, expected: list[str]) -> None:
    assert [site.name for site in calls("fractal/x.py", source)] == expected


# --- one definition of each CLI option -------------------------------------------------------

def _option_definitions() -> dict[str, list[str]]:
    """Each ``click.option(...)`` call under fractal/cli/, as source text, -> where it is."""
    import ast

    found: dict[str, list[str]] = {}
    for path in FILES:
        if not covers(("fractal/cli/",), path):
            continue
        for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "click.option":
                found.setdefault(ast.unparse(node), []).append(f"{path}:{node.lineno}")
    return found


def test_an_option_defined_the_same_way_is_defined_once() -> None:
    """An option two commands take alike (``--path``, ``--limit``, ``--json``...) is one
    decorator they share (``cli/context.path_option``, ``cli/format.limit_option``...),
    not two copies that can drift apart."""
    twice = {call: sites for call, sites in _option_definitions().items() if len(sites) > 1}
    assert not twice, "\n".join(f"{call}: {', '.join(sites)}" for call, sites in twice.items())


def test_path_is_defined_only_in_the_context_module() -> None:
    """``--path`` names where a command acts from, and every command builds its context from
    it: it is defined once, in ``cli/context.py``, whatever help line a command gives it."""
    sites = [site for call, where in _option_definitions().items() if "'--path'" in call
             for site in where]
    assert sites and all(site.startswith("fractal/cli/context.py:") for site in sites), sites


# --- every command answers --help ---------------------------------------------------------

def _command_paths() -> list[tuple[str, ...]]:
    """Every command path under ``fractal.cli.cli``, lazy and hidden ones included."""
    from fractal.cli import cli

    found: list[tuple[str, ...]] = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        found.append(path)
        if isinstance(command, click.Group):
            ctx = click.Context(command, info_name=path[-1] if path else "fractal")
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, f"fractal {' '.join((*path, name))} does not load"
                walk(sub, (*path, name))

    walk(cli, ())
    return found


COMMANDS = _command_paths()


def test_walk_finds_lazy_and_hidden_commands() -> None:
    assert {("node",), ("node", "status"), ("node", "_run"), ("init",)} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("fractal", *p)))
def test_every_command_answers_help(path: tuple[str, ...]) -> None:
    from fractal.cli import cli

    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="fractal")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: {' '.join(('fractal', *path))}")


# --- lazy imports ---------------------------------------------------------------------------

HEAVY = ("sqlalchemy", "alembic", "watchdog", "libtmux")


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with a tree and one idle node ``n``, made through the real CLI."""
    import subprocess

    repo = make_repo(tmp_path_factory.mktemp("lazy") / "repo")
    for args in (["init"], ["node", "init", "n"]):
        subprocess.run([sys.executable, "-m", "fractal", *args], cwd=repo, check=True,
                       capture_output=True, text=True, timeout=60)
    return repo


HELP_FORBIDDEN = (*HEAVY, "psutil", "fractal.runtime")
# What a read or a steering verb on a node without children never calls: the merge and
# conflict machinery, the other verbs' command modules, tmux on an idle node, the run-end
# value classes (``domain.run.reasons`` has what they need), logging.
MERGING = ("fractal.workspace.merge", "fractal.workspace.mergebase", "fractal.domain.merge.rules",
           "fractal.domain.merge.conflicts", "fractal.lifecycle.merge.target", "fractal.cli.merge")
VERB_FORBIDDEN = (*MERGING, "fractal.cli.cleanup", "fractal.cli.cost", "fractal.cli.config",
                  "fractal.cli.checks", "fractal.tmux", "fractal.domain.run.outcome", "logging",
                  "secrets")
READ_FORBIDDEN = (*HEAVY, "fractal.runtime.supervisor", *VERB_FORBIDDEN, "fractal.cli.steer",
                  "fractal.store.ledger")
LAZY_CASES = [
    (("--help",), HELP_FORBIDDEN, "fractal.cli"),
    (("node", "--help"), HELP_FORBIDDEN, "fractal.cli.node"),
    (("init", "--help"), HELP_FORBIDDEN, "fractal.cli.tree"),
    (("node", "status", "n"), READ_FORBIDDEN, "fractal.store.reader"),
    (("node", "list"), READ_FORBIDDEN, "fractal.store.reader"),
    (("node", "activity"), READ_FORBIDDEN, "fractal.store.reader"),
    (("node", "list", "--tree"), READ_FORBIDDEN, "fractal.cli.treeview"),
    (("inbox",), (*HEAVY, "fractal.runtime.supervisor"), "fractal.store.attention"),
    (("open", "--help"), (*HELP_FORBIDDEN, "textual", "textual_serve", "aiohttp",
                          "fractal.domain.webaccess"), "fractal.cli.open"),
]


@pytest.mark.parametrize(("args", "forbidden", "proof"), [
    pytest.param(*case, id=" ".join(("fractal", *case[0]))) for case in LAZY_CASES])
def test_lazy_imports(args: tuple[str, ...], forbidden: tuple[str, ...], proof: str,
                      small_tree: Path, tmp_path: Path) -> None:
    """``fractal --help`` and the read verbs must not pay for the runtime, SQLAlchemy,
    alembic, watchdog or libtmux: heavy imports stay lazy where they cost start-up time."""
    proc, loaded = modules_loaded(args, cwd=small_tree, scratch=tmp_path / "modules.json")
    assert proc.returncode == 0, proc.stderr
    assert proof in loaded  # the probe saw the command run
    assert sorted(m for m in loaded if under(m, forbidden)) == []


STEERING_CASES = [
    ("node", "stop", "n"), ("node", "finish", "n"), ("node", "finish", "--cancel", "n"),
    ("node", "pause", "n"), ("node", "approve", "n"), ("node", "resume", "n"),
]


@pytest.mark.parametrize("args", [pytest.param(a, id=" ".join(("fractal", *a)))
                                  for a in STEERING_CASES])
def test_steering_verbs_leave_sqlalchemy_out(args: tuple[str, ...], small_tree: Path,
                                              tmp_path: Path) -> None:
    """The steering verbs reach the database through the store's stdlib seam: SQLAlchemy and
    Alembic stay unimported (here each refuses the idle node, after reading and writing)."""
    proc, loaded = modules_loaded(args, cwd=small_tree, scratch=tmp_path / "modules.json")
    assert proc.returncode in (0, 1), proc.stderr
    assert "fractal.store.db" in loaded  # the probe saw the verb reach the store
    assert sorted(m for m in loaded if under(m, ("sqlalchemy", "alembic"))) == []
    if args[1] != "resume":  # a resume may relaunch a supervisor in tmux
        assert sorted(m for m in loaded if under(m, VERB_FORBIDDEN)) == []


KILL_FORBIDDEN = ("sqlalchemy", "alembic", "psutil", "hashlib", "shutil", "shlex", "logging",
                  "concurrent", "secrets", *MERGING, "fractal.domain.run.outcome",
                  "fractal.cli.cleanup", "fractal.cli.cost", "fractal.cli.config")
"""What ``fractal node kill`` never imports: it stops process groups from ``/proc`` and
pidfds (no psutil), computes launch markers without OpenSSL (no hashlib), runs tmux
without a binary lookup (no shutil), and starts no thread pool."""


def test_node_kill_imports_only_what_a_kill_needs(small_tree: Path, tmp_path: Path) -> None:
    """``node kill`` loads the process and tmux modules a kill needs and none of the heavy
    ones (here it refuses the idle node, after its module graph is loaded)."""
    proc, loaded = modules_loaded(("node", "kill", "n"), cwd=small_tree,
                                  scratch=tmp_path / "modules.json")
    assert proc.returncode == 1, proc.stderr
    assert "nothing to kill" in proc.stderr
    assert {"fractal.lifecycle.steering.kill", "fractal.procs.processes", "fractal.store.db"} <= loaded
    assert sorted(m for m in loaded if under(m, KILL_FORBIDDEN)) == []


def test_node_start_leaves_merging_and_attention_out(small_tree: Path, tmp_path: Path) -> None:
    """``node start`` loads its module graph before it parses its flags (``--clean``
    without ``--continue`` is a usage error, exit 2, before any tmux call): that graph
    holds none of the merge, attention or usage-window rules, and no logging."""
    proc, loaded = modules_loaded(("node", "start", "--clean", "n"), cwd=small_tree,
                                  scratch=tmp_path / "modules.json")
    assert proc.returncode == 2, proc.stderr
    assert "fractal.lifecycle.start.node" in loaded  # the probe saw the start path load
    forbidden = (*HEAVY, *MERGING, "fractal.domain.attention.rules", "fractal.domain.usage.windows",
                 "fractal.workspace.teardown", "logging")
    assert sorted(m for m in loaded if under(m, forbidden)) == []


def test_lazy_node_listing_matches_the_commands() -> None:
    """``fractal node --help`` lists the lazily loaded subcommands from a table of their
    first help sentences: it must print what the loaded commands would, at any width."""
    import importlib

    from fractal.cli.node import _LAZY, _LAZY_HELP

    assert set(_LAZY_HELP) == set(_LAZY)
    for name, (module, attr) in _LAZY.items():
        loaded = getattr(importlib.import_module(module), attr)
        assert loaded.name == name
        stand_in = click.Command(name, help=_LAZY_HELP[name])
        for limit in (20, 45, 60, 200):
            assert stand_in.get_short_help_str(limit) == loaded.get_short_help_str(limit), name


def test_the_supervisor_imports_no_sqlalchemy() -> None:
    """The supervisor's whole import graph (the pane's entry point) stays off SQLAlchemy:
    its writes go through the store's stdlib seam (about 30 MiB less per node)."""
    import subprocess

    code = ("import sys, fractal.runtime.entry; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "[]"



LAZY_PATTERNS = ("fractal/domain/checks/signature.py",)
"""Modules whose regular expressions are compiled on first use (a supervisor that never
runs a check never needs them), never at import."""


@pytest.mark.parametrize("path", LAZY_PATTERNS)
def test_patterns_are_compiled_on_first_use(path: str) -> None:
    import ast

    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    eager = [node.lineno for node in tree.body
             if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call)
             and ast.unparse(node.value.func) == "re.compile"]
    assert eager == [], f"{path}: re.compile at import on lines {eager}; use _pattern()"


def test_node_init_seeds_with_the_seed_commit() -> None:
    """``node init`` commits its seed with ``workspace/seedcommit.py`` (three git processes
    in the fresh worktree), not the general backstop (ten)."""
    text = Path("fractal/lifecycle/spawn.py").read_text(encoding="utf-8")
    assert "backstop_commit" not in text and "seed_commit(" in text


TYPED_TUPLES = {
    "fractal/agents/base.py": ("SessionEvent", "TextEvent", "ToolEvent", "CostEvent",
                               "ModelEvent", "ResultEvent", "UsageEvent", "NoticeEvent",
                               "WindowEvent"),
    "fractal/domain/usage/windows.py": ("UsageLimit", "UsageWarning", "WindowRow", "Decision"),
    "fractal/runtime/boot.py": ("RunOptions",),
    "fractal/store/transition.py": ("EventNote", "SignalNote", "Moved"),
}
"""Value classes every supervisor defines, kept as ``by_type`` NamedTuples (a fifth of a
frozen dataclass's definition cost; see ``fractal/domain/values.py``)."""


@pytest.mark.parametrize("path", sorted(TYPED_TUPLES))
def test_supervisor_value_classes_are_typed_tuples(path: str) -> None:
    import ast

    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for name in TYPED_TUPLES[path]:
        node = classes[name]
        assert [ast.unparse(b) for b in node.bases] == ["NamedTuple"], name
        assert [ast.unparse(d) for d in node.decorator_list] == ["by_type"], name

# --- module size -----------------------------------------------------------------------------

SIZE_TO_EXPLAIN = 400
SIZE_LIMIT = 600
WHY_PREFIX = "# Over 400 lines: "


def size_offence(path: str, text: str) -> str | None:
    """Why a module breaks the size rule, or None when it keeps it.

    A module is cut where its concepts part, not at a line count: up to 400 lines it needs
    nothing; past 400 its first line is a comment ``# Over 400 lines: <why>`` saying why
    it stays one module; past 600 it fails whatever it says.
    """
    lines = text.splitlines()
    if len(lines) > SIZE_LIMIT:
        return (f"{path} has {len(lines)} lines (> {SIZE_LIMIT}): split it where its "
                "concepts part")
    if len(lines) > SIZE_TO_EXPLAIN and not (lines[0].startswith(WHY_PREFIX)
                                             and lines[0].removeprefix(WHY_PREFIX).strip()):
        return (f"{path} has {len(lines)} lines (> {SIZE_TO_EXPLAIN}): split it where its "
                f"concepts part, or say why it is one concept on its first line "
                f"({WHY_PREFIX}...)")
    return None


@pytest.mark.parametrize(("lines", "first", "offends"), [
    (400, "", False),
    (401, "", True),
    (401, "# Over 400 lines: one schema", False),
    (401, "# Over 400 lines: ", True),
    (401, '"""# Over 400 lines: in a docstring"""', True),
    (600, "# Over 400 lines: one schema", False),
    (601, "# Over 400 lines: one schema", True),
], ids=["at-400", "401-silent", "401-explained", "401-empty-why", "401-docstring",
        "600-explained", "601-explained"])
def test_the_size_rule(lines: int, first: str, offends: bool) -> None:
    text = "\n".join([first, *["x = 1"] * (lines - 1)])
    assert (size_offence("fractal/x.py", text) is not None) is offends


@pytest.mark.parametrize("path", FILES)
def test_module_size(path: str) -> None:
    offence = size_offence(path, (ROOT / path).read_text(encoding="utf-8"))
    assert offence is None, offence


@pytest.mark.parametrize(("source", "offends"), [
    ("import os\n", False),
    ("def f():\n    import json\n", True),
    ("def f():\n    import json  # deferred: start-up cost\n", False),
    ("def f():\n    # deferred: only the merge path needs it\n    import json\n", False),
    ("def f():\n    # cycle: fractal.x imports this module\n    import json\n", False),
    ("def f():\n    import json  # lazy\n", True),
    ("def f():\n    # deferred:\n    import json\n", True),
    ("def f():\n    # deferred: why\n\n    import json\n", True),
    ("def f():\n    from a import (\n        b,\n    )  # deferred: why\n", False),
    ("class C:\n    def m(self):\n        from a import b\n", True),
    ("def f():\n    def g():\n        import json\n", True),
    ("if X:\n    import json\n", False),
], ids=["top", "bare", "same-line", "line-above", "cycle", "no-marker", "empty-why",
        "blank-between", "multi-line-end", "method", "nested", "module-level-if"])
def test_the_function_import_rule(source: str, offends: bool) -> None:
    assert bool(unexplained_function_imports("fractal/x.py", source)) is offends


def test_function_level_imports_say_why() -> None:
    """A module's dependencies are read at its top; an import deferred into a function
    says why on its line or the line above (start-up cost, a path only some calls take)."""
    offences = [str(site) for path in FILES for site in unexplained_function_imports(path)]
    assert not offences, ("imports inside functions without a `# deferred: <why>` or "
                          "`# cycle: <why>` comment (move each to the module's top, or say "
                          "why it waits):\n" + "\n".join(offences))


def unsafe_self_starts(source: str) -> list[int]:
    """Lines of ``source`` that start fractal as ``python -m fractal...`` without ``-P``:
    an argv list literal holding ``"-m", "fractal..."`` with no ``"-P"`` before the
    ``"-m"``, or an f-string (a shell script's text) holding `` -m fractal`` not preceded by
    ``-P``. Without ``-P`` Python puts the working directory first on sys.path, and a
    ``fractal/`` package planted there (an agent's worktree) runs in its place."""
    import ast

    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for at, word in enumerate(words[:-1]):
                module = words[at + 1]
                if (word == "-m" and isinstance(module, str)
                        and module.split(".")[0] == "fractal" and "-P" not in words[:at]):
                    found.append(node.lineno)
        elif isinstance(node, ast.JoinedStr):
            text = "".join(e.value for e in node.values
                           if isinstance(e, ast.Constant) and isinstance(e.value, str))
            if " -m fractal" in text.replace(" -P -m fractal", ""):
                found.append(node.lineno)
    return found


@pytest.mark.parametrize(("source", "offends"), [
    ('[sys.executable, "-m", "fractal", "commit"]', True),
    ('[sys.executable, "-P", "-m", "fractal", "commit"]', False),
    ('[sys.executable, "-m", "fractal.demo.agent"]', True),
    ('[sys.executable, "-m", "unittest", "discover"]', False),
    ('["git", "commit", "-m", "fractal: scratch"]', False),
    ('f"exec {python} -m fractal \\"$@\\""', True),
    ('f"exec {python} -P -m fractal \\"$@\\""', False),
])
def test_the_safe_path_rule(source: str, offends: bool) -> None:
    assert bool(unsafe_self_starts(source)) is offends


def test_fractal_starts_itself_with_a_safe_path() -> None:
    """Every place fractal starts ``python -m fractal`` passes ``-P`` (docs/security.md)."""
    offenders = [f"{path}:{line}" for path in FILES
                 for line in unsafe_self_starts(Path(path).read_text(encoding="utf-8"))]
    assert offenders == [], f"start fractal with -P: {offenders}"
