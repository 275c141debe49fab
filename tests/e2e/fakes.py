"""Fake ``claude`` and ``codex`` executables on PATH for the e2e tests of the real-CLI
backends (tests/stubs/fake_claude.py, fake_codex.py): the environment of ``fractal node
start`` is what the supervisor and the agent see, so the fakes reach the agent through it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import wait_until
from tests.trees import Tree

STUBS = Path(__file__).resolve().parent.parent / "stubs"


@dataclass
class Fakes:
    """A bin directory holding the fake CLIs and the directory they record calls in."""

    bindir: Path
    state: Path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for ``fractal node start``: fakes first on PATH, a 1 s kill grace."""
        env = {**os.environ, "PATH": f"{self.bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               "FAKE_CLI_DIR": str(self.state), "FRACTAL_KILL_GRACE": "1"}
        env.update(extra)
        return env

    def calls(self, cli: str) -> list[dict[str, Any]]:
        """Every recorded call of ``cli``, in order: argv, env, prompt, cwd, stdin_devnull."""
        return [json.loads(p.read_text()) for p in sorted(self.state.glob(f"{cli}-call-*.json"))]


def make_fakes(tmp_path: Path, clis: tuple[str, ...] = ("claude", "codex")) -> Fakes:
    """Install wrapper scripts named after ``clis`` that exec the fakes."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for cli in clis:
        wrapper = bindir / cli
        wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{STUBS / f'fake_{cli}.py'}' "
                           "\"$@\"\n")
        wrapper.chmod(0o755)
    return Fakes(bindir=bindir, state=tmp_path / "fakestate")


def start_all(tree: Tree, names: list[str], env: Mapping[str, str],
              timeout: float = 60) -> dict[str, str]:
    """Start every node, then wait until all have settled; return their statuses."""
    for name in names:
        tree.cli("node", "start", name, env=env)
    return {name: tree.wait_settled(name, timeout=timeout) for name in names}


def step_rows(tree: Tree, name: str) -> list[tuple[Any, ...]]:
    """(step_name, status, exit_code, metadata, cost, input, cached, output, session)."""
    return tree.sql("SELECT step_name, status, exit_code, metadata, cost, input_tokens, "
                    "cached_input_tokens, output_tokens, session FROM steps WHERE node = ? "
                    "ORDER BY step_id", f"main.{name}")


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie counts as gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid_file: Path) -> None:
    """Wait until the process whose pid ``pid_file`` holds has been reaped."""
    pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(),
                         timeout=10, message=f"{pid_file} written"))
    wait_until(lambda: gone(pid), timeout=15, message=f"pid {pid} reaped")
