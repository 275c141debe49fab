"""Static scans for the style tests: what each source file imports and calls.

Everything is read with ``ast``, so imports inside functions, ``TYPE_CHECKING`` blocks and
``importlib.import_module("literal")`` count, and strings or comments never do. Paths are
repository-relative POSIX strings (``fractal/procs/processes.py``); a rule's path entry
ending in ``/`` covers a whole package.

The scans of the package's files are made once for all the test processes of a run and
kept in ``SCAN_CACHE`` (see ``_package_scans``): parsing and walking every file costs
about two seconds of CPU, which each xdist worker paid again.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Site:
    """One import or call found in ``path`` (repo-relative) at ``line``; ``name`` is dotted."""

    path: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}"


def source_files(package: str = "fractal") -> list[str]:
    """Repo-relative paths of every ``.py`` file under ``package``, sorted."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*.py"))


def covers(entries: Iterable[str], path: str) -> bool:
    """True when ``path`` equals an entry, or lies under an entry that ends with ``/``."""
    return any(path == e or (e.endswith("/") and path.startswith(e)) for e in entries)


def under(name: str, prefixes: Iterable[str]) -> bool:
    """True when dotted ``name`` is one of ``prefixes`` or a submodule/attribute of one."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def module_of(path: str) -> str:
    """Dotted module name of a repo-relative file (a package's ``__init__`` is the package)."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: str) -> str:
    module = module_of(path)
    return module if path.endswith("__init__.py") else module.rpartition(".")[0]


def _resolve(node: ast.ImportFrom, path: str) -> str:
    """The absolute module of a (possibly relative) ``from X import ...``."""
    if not node.level:
        return node.module or ""
    base = _package_of(path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def dotted(expr: ast.expr) -> str:
    """``os.kill`` for ``os.kill``, ``*.send_signal`` when the base is not a plain name chain."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return f"{dotted(expr.value)}.{expr.attr}"
    return "*"


def _parse(path: str, source: str | None) -> ast.Module:
    """The syntax tree of ``source``, or of the file at ``path`` (parsed once per process:
    every rule walks the same files, and the walks only read the trees)."""
    if source is not None:
        return ast.parse(source, filename=path)
    return _parse_file(path)


@functools.cache
def _parse_file(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path)


def imports(path: str, source: str | None = None) -> list[Site]:
    """Every module ``path`` imports: ``import a.b`` gives ``a.b``; ``from a import b`` gives
    ``a.b`` (b may be a submodule or an attribute; either way it comes from ``a``); relative
    imports are resolved; ``importlib.import_module("a.b")`` gives ``a.b``.

    ``source`` replaces the file's text (for testing the scanner itself).
    """
    if source is None:
        return list(_file_imports(path))
    return _imports(path, source)


@functools.cache
def _file_imports(path: str) -> tuple[Site, ...]:
    known = _package_scans().get(path)
    if known is not None:
        return tuple(Site(path, line, name) for line, name in known["imports"])
    return tuple(_imports(path, None))


def _imports(path: str, source: str | None) -> list[Site]:
    sites: list[Site] = []
    for node in ast.walk(_parse(path, source)):
        if isinstance(node, ast.Import):
            sites += [Site(path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node, path)
            sites += [Site(path, node.lineno, f"{module}.{alias.name}" if module else alias.name)
                      for alias in node.names]
        elif (isinstance(node, ast.Call) and dotted(node.func).endswith("import_module")
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            sites.append(Site(path, node.lineno, node.args[0].value))
    return sorted(sites, key=lambda s: (s.line, s.name))


DEFERRAL = re.compile(r"#\s*(deferred|cycle):\s*\S")


def unexplained_function_imports(path: str, source: str | None = None) -> list[Site]:
    """Imports inside a function (or method) of ``path`` with no reason beside them.

    The rule: an import statement inside a function body carries a comment ``# deferred:
    <why>`` or ``# cycle: <why>`` on its own first or last line or on the line right above
    it; otherwise it belongs at the top of the module, where a reader sees the module's
    dependencies. One ``Site`` per offending statement (its first line, its first name).
    """
    text = source if source is not None else (ROOT / path).read_text(encoding="utf-8")
    lines = text.splitlines()
    offences: list[Site] = []

    def said(node: ast.stmt) -> bool:
        near = [lines[node.lineno - 1], lines[(node.end_lineno or node.lineno) - 1]]
        if node.lineno > 1:
            near.append(lines[node.lineno - 2].strip() if
                        lines[node.lineno - 2].strip().startswith("#") else "")
        return any(DEFERRAL.search(line) for line in near)

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) and not said(child):
                module = child.module if isinstance(child, ast.ImportFrom) else None
                name = child.names[0].name
                offences.append(Site(path, child.lineno, f"{module}.{name}" if module else name))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                          ast.Lambda)))

    walk(_parse(path, source), False)
    return offences


def calls(path: str, source: str | None = None) -> list[Site]:
    """Every call in ``path``, named by its callee (``print``, ``os.killpg``, ``proc.send_signal``,
    ``*.send_signal`` when the receiver is an expression)."""
    if source is None:
        return list(_file_calls(path))
    return _calls(path, source)


@functools.cache
def _file_calls(path: str) -> tuple[Site, ...]:
    known = _package_scans().get(path)
    if known is not None:
        return tuple(Site(path, line, name) for line, name in known["calls"])
    return tuple(_calls(path, None))


def import_graph(paths: Iterable[str]) -> dict[str, set[str]]:
    """path -> the files of ``paths`` it imports, module-level and function-level imports
    alike (``TYPE_CHECKING`` ones too: a circle of annotations is still a circle of
    concepts). An imported name resolves to the longest dotted prefix that is a module of
    ``paths`` (``from fractal.store import db`` is ``fractal/store/db.py``; an attribute's
    module is its file), and so does each package above it, whose ``__init__`` runs first;
    a file's import of itself (or of its own package) is dropped."""
    files = list(paths)
    by_module = {module_of(path): path for path in files}
    graph: dict[str, set[str]] = {path: set() for path in files}
    for path in files:
        for site in imports(path):
            parts = site.name.split(".")
            while parts and ".".join(parts) not in by_module:
                parts.pop()
            target = by_module.get(".".join(parts)) if parts else None
            if target is not None and target != path:
                graph[path].add(target)
            while len(parts) > 1:  # importing a.b.c runs a/b/__init__.py (and a's) first
                parts.pop()
                package = by_module.get(".".join(parts))
                if package is not None and package != path:
                    graph[path].add(package)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one file, each
    sorted, in sorted order: every file of one imports every other, directly or not
    (Tarjan's algorithm, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


SCAN_CACHE = ROOT / ".cache" / "stylescan.json"
"""The imports and calls of every file under ``fractal/``, with the digest of the sources
and of this scanner they were read from (git-ignored, as all of ``.cache/``)."""

_Scans = dict[str, dict[str, list[tuple[int, str]]]]


def _sources_digest(paths: list[str]) -> str:
    """SHA-256 over this scanner's own source and each path with its content: any edit
    (or a new or removed file) makes new scans."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in paths:
        digest.update(path.encode() + b"\0" + (ROOT / path).read_bytes() + b"\0")
    return digest.hexdigest()


def _read_scans(key: str) -> _Scans | None:
    try:
        data = json.loads(SCAN_CACHE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    files = data.get("files")
    return files if isinstance(files, dict) else None


@functools.cache
def _package_scans() -> _Scans:
    """path -> {"imports": [(line, name)], "calls": [(line, name)]} for every ``.py`` file
    under ``fractal/``, as ``_imports`` and ``_calls`` find them.

    Read from ``SCAN_CACHE`` when its digest matches the sources; else made under an
    exclusive lock on ``<SCAN_CACHE>.lock`` (the other workers of the run wait for it
    instead of parsing too) and written atomically. Any failure to use the file falls
    back to scanning in this process."""
    paths = source_files("fractal")
    key = _sources_digest(paths)
    found = _read_scans(key)
    if found is not None:
        return found
    try:
        SCAN_CACHE.parent.mkdir(parents=True, exist_ok=True)
        lock = SCAN_CACHE.parent.joinpath(SCAN_CACHE.name + ".lock").open("a")
    except OSError:
        return _scan_all(paths)
    with lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        found = _read_scans(key)
        if found is not None:
            return found
        files = _scan_all(paths)
        staging = SCAN_CACHE.with_name(f"{SCAN_CACHE.name}.{os.getpid()}")
        try:
            staging.write_text(json.dumps({"key": key, "files": files}), encoding="utf-8")
            staging.replace(SCAN_CACHE)
        except OSError:
            staging.unlink(missing_ok=True)
        return files


def _scan_all(paths: list[str]) -> _Scans:
    return {path: {"imports": [(s.line, s.name) for s in _imports(path, None)],
                   "calls": [(s.line, s.name) for s in _calls(path, None)]}
            for path in paths}


def _calls(path: str, source: str | None) -> list[Site]:
    return sorted((Site(path, node.lineno, dotted(node.func))
                   for node in ast.walk(_parse(path, source)) if isinstance(node, ast.Call)),
                  key=lambda s: (s.line, s.name))


_PROBE = """\
import json, runpy, sys
out, sys.argv = sys.argv[1], ["fractal", *sys.argv[2:]]
try:
    runpy.run_module("fractal", run_name="__main__", alter_sys=True)
finally:
    with open(out, "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""


def modules_loaded(args: Iterable[str], *, cwd: Path, scratch: Path,
                   timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -m fractal ARGS`` in a fresh interpreter in ``cwd``; return the finished
    process and the names in its ``sys.modules`` when the command ended (exit or not).

    ``scratch`` is a file path the child writes the module list to (JSON).
    """
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(scratch), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)
    loaded = set(json.loads(scratch.read_text())) if scratch.exists() else set()
    return proc, loaded
