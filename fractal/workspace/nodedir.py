"""Node data directories: seeding, atomic writes, file locks, config.json, the exclude block.

Every file the loop writes that others read goes through ``write_atomic`` (temp + fsync +
rename), and every shared read-modify-write takes ``file_lock``, so no reader ever sees a torn
``config.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from fractal.domain.errors import InvalidValue
from fractal.domain.limits import NODE_FILE_CAP, over_cap
from fractal.errors import ConfigError, FractalError
from fractal.workspace.artifacts import RUNTIME_ARTIFACTS
from fractal.workspace.capped import read_capped

__all__ = [
    "BLOCK_BEGIN",
    "BLOCK_END",
    "OversizeFile",
    "ensure_exclude_block",
    "file_lock",
    "flock_held",
    "inherit_dir",
    "node_file_text",
    "read_config",
    "seed_node_dir",
    "seed_root_dir",
    "seed_task_and_gates",
    "update_config",
    "write_atomic",
]

BLOCK_BEGIN = "# >>> fractal >>>"
BLOCK_END = "# <<< fractal <<<"
_LOCK_POLL = 0.05  # seconds between flock attempts


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never a torn one.

    Writes a temp file ``.<name>.<random>.tmp`` in the same directory (a runtime artifact),
    fsyncs it, renames it over ``path`` and fsyncs the directory. ``str`` is encoded as UTF-8.
    ``mode`` sets the permission bits; without it an existing file keeps its mode and a new
    one gets the default (0666 minus umask). Raises OSError when the directory is not
    writable; the temp file is removed on any failure.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if mode is None:
        with contextlib.suppress(FileNotFoundError):
            mode = path.stat().st_mode & 0o7777
    while True:
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float = 30.0) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its directory, if missing) for the ``with`` body.

    Polls every 50 ms for up to ``timeout`` seconds, then raises FractalError naming the lock
    file. The lock is released when the body exits (or the process dies); the file stays.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with flock_held(fd, timeout, lambda: FractalError(
            f"timed out after {timeout:g}s waiting for the lock {path}: another fractal "
            "process holds it; wait for it to finish and retry")):
        yield


@contextlib.contextmanager
def flock_held(fd: int, timeout: float, refusal: Callable[[], Exception]) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the open ``fd`` for the ``with`` body, then release
    it and close ``fd`` (closed on a refusal too). Polls every 50 ms for up to ``timeout``
    seconds; raises ``refusal()`` when another holder kept it that long. Gives the body
    whether it had to wait for another holder (True) or found the lock free (False)."""
    try:
        deadline = time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = True
                if time.monotonic() >= deadline:
                    raise refusal() from None
                time.sleep(_LOCK_POLL)
        try:
            yield waited
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class OversizeFile(OSError):
    """A node file holds more than the cap its reader takes (``domain.limits``); the
    message says which file, the cap and what to do."""


def node_file_text(path: Path) -> str:
    """The text of the node file ``path`` (``NODE.md``), undecodable bytes replaced.
    Raises OversizeFile past ``NODE_FILE_CAP`` bytes, OSError (missing, not a regular
    file: a FIFO is refused, never waited on)."""
    data = read_capped(path, NODE_FILE_CAP)
    if len(data) > NODE_FILE_CAP:
        raise OversizeFile(over_cap(str(path), NODE_FILE_CAP))
    return data.decode("utf-8", errors="replace")


def read_config(path: Path) -> dict[str, object]:
    """Read a JSON object from ``path`` (a node's ``config.json``).

    Returns the parsed dict. Raises ConfigError (``source`` = the path) when the file is
    missing, not UTF-8, malformed JSON (the message gives line and column) or not an object.
    """
    if path.exists() and not path.is_file():  # a FIFO would block the reader forever
        raise ConfigError([f"{path} is not a regular file; restore it from git"],
                          source=str(path))
    try:
        data = read_capped(path, NODE_FILE_CAP)
    except FileNotFoundError:
        raise ConfigError([f"{path} does not exist; create the node or restore the file"],
                          source=str(path)) from None
    except OSError as exc:
        raise ConfigError([f"{path} cannot be read: {exc.strerror or exc}"],
                          source=str(path)) from None
    return config_from_bytes(path, data)


def config_from_bytes(path: Path, data: bytes) -> dict[str, object]:
    """The JSON object ``data`` (the bytes of ``path``, a node's ``config.json``) holds.
    Raises ConfigError (``source`` = the path) when it is not UTF-8, malformed JSON (the
    message gives line and column), not an object, or over ``NODE_FILE_CAP`` bytes."""
    if len(data) > NODE_FILE_CAP:
        raise ConfigError([over_cap(str(path), NODE_FILE_CAP)], source=str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})"],
                          source=str(path)) from None
    import json  # deferred: start-up cost (json: 5 modules)

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            [f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
             "fix the file or restore it from git"],
            source=str(path),
        ) from None
    except RecursionError:
        raise ConfigError([f"{path}: JSON nested deeper than the parser reads; a config is "
                           "one object of settings: fix the file or restore it from git"],
                          source=str(path)) from None
    if not isinstance(value, dict):
        raise ConfigError(
            [f"{path}: expected a JSON object at the top level, got {type(value).__name__}"],
            source=str(path),
        )
    return value


def update_config(path: Path, updates: Mapping[str, object], *,
                  check: Callable[[dict[str, object], dict[str, object]], None] | None = None
                  ) -> dict[str, object]:
    """Merge ``updates`` into the JSON object at ``path`` and write it back; return the result.

    The read-merge-write runs under ``file_lock(<path>.lock)`` (``config.json.lock``) and the
    file is replaced atomically, sorted by key, 2-space indented, with a trailing newline. A
    missing file starts as ``{}``. ``check(before, merged)``, when given, runs under the lock
    before the write; whatever it raises aborts the write. Raises ConfigError when the
    existing file is malformed (it is left untouched) and TypeError when a value is not
    JSON-serialisable.
    """
    import json  # deferred: start-up cost (json: 5 modules)
    lock = path.with_name(path.name + ".lock")
    with file_lock(lock):
        before = read_config(path) if path.exists() else {}
        merged = dict(before)
        merged.update(updates)
        if check is not None:
            check(before, merged)

        text = json.dumps(merged, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        write_atomic(path, text)
    return merged


def _exclude_block() -> list[str]:
    return [
        BLOCK_BEGIN,
        "# Managed by fractal (node worktrees and runtime files); edits here are overwritten.",
        "/.worktrees/",
        *RUNTIME_ARTIFACTS,
        BLOCK_END,
    ]


def ensure_exclude_block(common_dir: Path) -> bool:
    """Write or refresh the fractal block in ``<common_dir>/info/exclude``; True when the
    file was written (the block was missing or out of date).

    The block, between ``# >>> fractal >>>`` and ``# <<< fractal <<<``, lists ``/.worktrees/``
    and every RUNTIME_ARTIFACTS pattern. An existing block is replaced where it stands;
    otherwise the block is appended. Every other line is kept as it was; a start marker with
    no end marker is dropped on its own (never the user lines after it). Idempotent: the
    file is not rewritten when nothing changes. The committed ``.gitignore`` is never touched.
    """
    exclude = common_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = exclude.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        old = ""
    lines = old.splitlines()
    kept: list[str] = []
    insert_at: int | None = None
    i = 0
    while i < len(lines):
        if lines[i].strip() == BLOCK_BEGIN:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == BLOCK_END),
                       None)
            if insert_at is None:
                insert_at = len(kept)
            i = i + 1 if end is None else end + 1
            continue
        if lines[i].strip() != BLOCK_END:
            kept.append(lines[i])
        i += 1
    if insert_at is None:
        insert_at = len(kept)
    new_lines = kept[:insert_at] + _exclude_block() + kept[insert_at:]
    new = "\n".join(new_lines) + "\n"
    if new == old:
        return False
    write_atomic(exclude, new.encode("utf-8", errors="surrogateescape"))
    return True


def _copy_missing(src: Path, dst: Path, *, mode: int | None = None) -> None:
    """Copy ``src`` to ``dst`` unless a file is there; a link at ``dst`` is replaced by
    the copy (unlinked, never followed nor read through). The caller made ``dst``'s
    directory."""
    if dst.is_symlink():
        dst.unlink()
    elif dst.exists():
        return
    import shutil  # deferred: start-up cost (7 modules)

    shutil.copyfile(src, dst)
    if mode is not None:
        dst.chmod(mode)


def seed_node_dir(node_dir: Path) -> None:
    """Fill a node data dir with the packaged seeds; never overwrite an existing file.

    Copies ``NODE.md``, ``steps/*.md``, ``scripts/*.sh`` (mode 0755) and creates an empty
    ``plans/.gitkeep`` (``PLANS_DIR``; the default steps are 00-PREPARE .. 04-COMMIT). Creates
    ``node_dir`` if needed. ``config.json`` is not written here. Each directory written
    into (``.fractal``, the node dir, ``steps``, ``scripts``, ``plans``) is checked with
    ``lstat`` first and a link or file in its place removed, never followed
    (``nodelinks.real_node_dir``). Raises OSError on I/O errors.
    """
    from fractal.assets import asset_root  # deferred: start-up cost (1 module)
    from fractal.workspace.nodelinks import real_dirs, real_node_dir  # deferred: start-up cost

    root = asset_root()
    real_node_dir(node_dir)
    _copy_missing(root / "NODE.md", node_dir / "NODE.md")
    steps, scripts = real_dirs(node_dir, "steps"), real_dirs(node_dir, "scripts")
    for step in sorted((root / "steps").glob("*.md")):
        _copy_missing(step, steps / step.name)
    for script in sorted((root / "scripts").glob("*.sh")):
        _copy_missing(script, scripts / script.name, mode=0o755)
    keep = real_dirs(node_dir, "plans") / ".gitkeep"
    if not os.path.lexists(keep):
        keep.touch()


def seed_root_dir(data_dir: Path) -> bool:
    """Create the root ("user") node's data dir with a self-ignoring ``.gitignore`` (``*``);
    True when it wrote that file.

    The directory holds the database and the user config and is never committed.
    An existing ``.gitignore`` is left alone. Raises OSError on I/O errors.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    ignore = data_dir / ".gitignore"
    if ignore.exists():
        return False
    write_atomic(ignore, "*\n")
    return True


def inherit_dir(parent_node_dir: Path, node_dir: Path, surface: str) -> None:
    """Replace ``<node_dir>/<surface>`` (``steps`` or ``scripts``) with a copy of the
    parent's (its committed tip, as the new worktree holds it; file modes kept). Raises
    FractalError when the parent has none, OSError on I/O errors."""
    source = parent_node_dir / surface
    if not source.is_dir():
        raise FractalError(f"cannot inherit {surface}: {source} does not exist at the "
                           "parent's committed tip; commit the parent's node directory first")
    import shutil  # deferred: start-up cost (7 modules)

    from fractal.workspace.nodelinks import remove_entry  # deferred: as shutil above

    target = node_dir / surface
    remove_entry(target)  # a link is unlinked, never followed; a failure raises
    shutil.copytree(source, target, symlinks=True)


def seed_children_wait(node_dir: Path, step: str = "REVIEW") -> bool:
    """Mark the node's ``step`` (name, file name or number) ``wait: children``, so the
    loop holds before it until every child settled; False when no single step matches."""
    # deferred: start-up cost (32 modules)
    from fractal.domain.nodeinit import match_step, with_children_wait

    steps = node_dir / "steps"
    names = sorted(p.name for p in steps.iterdir() if p.is_file()) if steps.is_dir() else []
    try:
        path = steps / match_step(names, step)
    except InvalidValue:
        return False
    write_atomic(path, with_children_wait(path.read_text(encoding="utf-8")))
    return True


def seed_task_and_gates(node_dir: Path, task: str | None, gates: Sequence[str]) -> None:
    """Write ``task`` into NODE.md's Instructions section (None: keep the template) and
    mark each step of ``gates`` (a name, file name or number) ``requires_approval:
    true``. Raises InvalidValue for an empty task or a gate naming no single step."""
    # deferred: start-up cost (32 modules)
    from fractal.domain.nodeinit import fill_instructions, match_step, with_approval_gate

    if task is not None:
        node_md = node_dir / "NODE.md"
        write_atomic(node_md, fill_instructions(node_md.read_text(encoding="utf-8"), task))
    steps = node_dir / "steps"
    names = sorted(p.name for p in steps.iterdir() if p.is_file()) if steps.is_dir() else []
    for gate in gates:
        step = steps / match_step(names, gate)
        write_atomic(step, with_approval_gate(step.read_text(encoding="utf-8")))
