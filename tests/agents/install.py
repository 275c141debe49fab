"""Install the pinned real agent CLIs from npm into the project's cache directory.

The real-CLI tier (``make test-agents``; issue 3, "The real CLIs, end to end") runs Claude
Code and Codex themselves, at the versions spec/agent-clis.md was captured with. They are
installed with ``npm install -g --prefix .cache/agents`` (about 660 MB, git-ignored), once:
an install whose versions match is reused. Concurrent test workers serialise on a lock
file. Run ``python -m tests.agents.install`` to install ahead of a test run.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "agents"
CACHE_ENV = "FRACTAL_AGENTS_CACHE"
"""Set it to install into (or reuse) another directory, e.g. a CI cache."""
PINNED = {"@anthropic-ai/claude-code": "2.1.197", "@openai/codex": "0.171.0"}
"""npm package -> exact version (spec/agent-clis.md)."""
BINARIES = {"@anthropic-ai/claude-code": "claude", "@openai/codex": "codex"}
INSTALL_TIMEOUT = 600.0  # seconds: a cold install took 8 s; a slow mirror may take minutes


class Unavailable(Exception):
    """The CLIs cannot be installed here (no npm, registry unreachable): skip the tier."""


def cache_dir(env: Mapping[str, str]) -> Path:
    """``$FRACTAL_AGENTS_CACHE`` when set, else ``<repo>/.cache/agents``."""
    return Path(env[CACHE_ENV]).resolve() if env.get(CACHE_ENV) else CACHE


def bin_dir(cache: Path = CACHE) -> Path:
    """``<cache>/bin``: put it first on PATH to run the pinned ``claude`` and ``codex``."""
    return cache / "bin"


def installed_versions(cache: Path = CACHE) -> dict[str, str]:
    """package -> version found under ``cache`` (a package missing from it is left out)."""
    found: dict[str, str] = {}
    for package in PINNED:
        manifest = cache / "lib" / "node_modules" / package / "package.json"
        try:
            found[package] = str(json.loads(manifest.read_text())["version"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def _runs(binary: Path, env: Mapping[str, str]) -> bool:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, env=dict(env),
                              stdin=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ready(cache: Path, env: Mapping[str, str]) -> bool:
    """The pinned versions are installed under ``cache`` and both binaries answer."""
    return installed_versions(cache) == PINNED and all(
        _runs(bin_dir(cache) / name, env) for name in BINARIES.values())


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.parent.mkdir(parents=True, exist_ok=True)
    with (cache.parent / f"{cache.name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gist(text: str, lines: int = 4) -> str:
    """The head of npm's ``npm error`` block (code, cause), else the last lines of ``text``."""
    errors = [line.removeprefix("npm error").strip() for line in text.splitlines()
              if line.startswith("npm error")]
    picked = [line for line in errors if line][:lines] or [
        line.strip() for line in text.strip().splitlines()[-lines:] if line.strip()]
    return " | ".join(picked)


def ensure_installed(env: Mapping[str, str], cache: Path | None = None) -> Path:
    """Install the pinned CLIs under ``cache`` (default ``cache_dir(env)``) unless they are
    there already; return the bin directory.

    ``env`` is the environment npm runs with: the caller's real one (its HOME holds the
    user's ``.npmrc`` and npm cache), not the hermetic test HOME. Raises Unavailable when
    npm is missing, fails or times out (registry unreachable); raises RuntimeError when
    npm succeeded but a binary does not run.
    """
    cache = cache_dir(env) if cache is None else cache
    with _locked(cache):
        if ready(cache, env):
            return bin_dir(cache)
        npm = shutil.which("npm", path=env.get("PATH"))
        if npm is None:
            raise Unavailable("npm not found on PATH: the real-CLI tier needs Node.js and "
                              "npm (apt-get install npm), then `make test-agents`")
        specs = [f"{package}@{version}" for package, version in PINNED.items()]
        argv = [npm, "install", "--global", "--prefix", str(cache), "--no-fund", "--no-audit",
                "--fetch-retries", "1", "--fetch-retry-maxtimeout", "10000",
                "--fetch-timeout", "60000", *specs]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=dict(env),
                                  stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise Unavailable(f"npm install of {' '.join(specs)} did not finish in "
                              f"{INSTALL_TIMEOUT:.0f}s (is the npm registry reachable?)") from exc
        if done.returncode != 0:
            raise Unavailable(f"npm install of {' '.join(specs)} failed (exit "
                              f"{done.returncode}; is the npm registry reachable?): "
                              f"{_gist(done.stderr or done.stdout)}")
        _finish_claude(cache, env)
        if not ready(cache, env):
            raise RuntimeError(f"installed {' '.join(specs)} under {cache}, but "
                               f"{installed_versions(cache)} / `--version` does not run; "
                               f"remove {cache} and try again. npm said: {_gist(done.stdout)}")
        return bin_dir(cache)


def _finish_claude(cache: Path, env: Mapping[str, str]) -> None:
    """Run claude-code's postinstall by hand when npm skipped it (spec/agent-clis.md: it
    copies the platform binary over the ``bin/claude.exe`` placeholder)."""
    if _runs(bin_dir(cache) / "claude", env):
        return
    package = cache / "lib" / "node_modules" / "@anthropic-ai" / "claude-code"
    node = shutil.which("node", path=env.get("PATH"))
    if node and (package / "install.cjs").is_file():
        subprocess.run([node, "install.cjs"], cwd=package, capture_output=True, env=dict(env),
                       stdin=subprocess.DEVNULL, timeout=120, check=False)


def main() -> int:
    """Install (or confirm) the pinned CLIs; print the bin directory."""
    try:
        where = ensure_installed(os.environ)
    except Unavailable as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write(f"{where}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
