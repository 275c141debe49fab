"""The price-table cache: a local copy of LiteLLM's public price table
(docs/budgets.md, "Pricing token-priced agents").

The copy lives at ``~/.fractal/pricing.json`` (``FRACTAL_PRICING_FILE`` moves it) and is
fetched from ``FRACTAL_PRICING_URL`` (default: LiteLLM's raw file on GitHub; ``file://``
URLs work, which is how the tests serve a fixture). ``refresh`` fetches when the copy is
missing or older than a day, with a 10 s timeout and an atomic replace; a failed fetch
keeps the old copy (``stale``) or reports ``missing``. The table is parsed once per file
version and process.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from fractal.domain.budget.prices import Rates, parse_table
from fractal.domain.errors import FractalError
from fractal.workspace.nodedir import write_atomic

__all__ = [
    "DEFAULT_URL",
    "FETCH_TIMEOUT",
    "FILE_ENV",
    "MAX_AGE",
    "URL_ENV",
    "Freshness",
    "PricingError",
    "Refresh",
    "fetch",
    "load_table",
    "pricing_path",
    "pricing_url",
    "refresh",
    "token_priced",
]

DEFAULT_URL = ("https://raw.githubusercontent.com/BerriAI/litellm/main/"
               "model_prices_and_context_window.json")
FILE_ENV = "FRACTAL_PRICING_FILE"
URL_ENV = "FRACTAL_PRICING_URL"
MAX_AGE = 24 * 3600.0
"""Seconds after which the copy is refreshed (at run start and at iteration tops)."""
FETCH_TIMEOUT = 10.0
"""Socket timeout of one fetch, seconds."""
MAX_BYTES = 64 * 1024 * 1024


class PricingError(FractalError):
    """The price table could not be fetched or read."""


class Freshness(StrEnum):
    """What ``refresh`` found: a fresh copy, a new fetch, an old copy kept, or nothing."""

    FRESH = "fresh"
    FETCHED = "fetched"
    STALE = "stale"
    MISSING = "missing"


@dataclass(frozen=True)
class Refresh:
    """The outcome of ``refresh``: ``state``, the copy's ``path``, the fetch ``error`` (when
    one failed) and the copy's age in seconds (None when there is none)."""

    state: Freshness
    path: Path
    url: str
    error: str | None = None
    age: float | None = None


def token_priced(backend: str, provider: str | None) -> bool:
    """True when a backend's spend must be priced from token usage:
    ``codex`` always (it reports tokens only), ``claude`` on a provider route (its own
    figure is at Anthropic's list price). Other backends report dollars or nothing."""
    return backend == "codex" or (backend == "claude" and bool(provider))


def pricing_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the copy lives: ``$FRACTAL_PRICING_FILE``, else ``~/.fractal/pricing.json``."""
    env = os.environ if env is None else env
    override = env.get(FILE_ENV)
    if override:
        return Path(override).expanduser()
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".fractal" / "pricing.json"


def pricing_url(env: Mapping[str, str] | None = None) -> str:
    """Where the table is fetched from: ``$FRACTAL_PRICING_URL``, else LiteLLM on GitHub."""
    env = os.environ if env is None else env
    return env.get(URL_ENV) or DEFAULT_URL


def _age(path: Path, now: float) -> float | None:
    try:
        return max(0.0, now - path.stat().st_mtime)
    except OSError:
        return None


def fetch(url: str, dest: Path, timeout: float = FETCH_TIMEOUT) -> None:
    """Download the table at ``url`` and replace ``dest`` atomically.

    The body must be a JSON object with at least one priced model. Raises PricingError
    saying what went wrong, then the URL (the cause first: a reason clipped to its cap
    loses the URL, never the cause); ``dest`` is untouched then.
    """
    import urllib.error  # deferred: urllib.request pulls in ssl and http (megabytes of RSS)
    import urllib.request  # deferred: start-up cost (55 modules)

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PricingError(f"could not fetch the price table: {exc} (from {url})") from None
    if len(body) > MAX_BYTES:
        raise PricingError(f"the price table at {url} is larger than {MAX_BYTES} bytes")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PricingError(f"the price table at {url} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not parse_table(data):
        raise PricingError(f"the price table at {url} lists no priced model")
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, body)
    _TABLES.clear()


def refresh(env: Mapping[str, str] | None = None, *, max_age: float = MAX_AGE,
            now: float | None = None) -> Refresh:
    """Make sure a usable copy exists: keep one younger than ``max_age`` seconds, else fetch.

    Never raises: a failed fetch returns ``stale`` (an old copy is kept and used) or
    ``missing`` (no copy at all) with the error.
    """
    path, url = pricing_path(env), pricing_url(env)
    now = time.time() if now is None else now
    age = _age(path, now)
    if age is not None and age < max_age:
        return Refresh(Freshness.FRESH, path, url, age=age)
    try:
        fetch(url, path)
    except (PricingError, OSError) as exc:
        state = Freshness.MISSING if age is None else Freshness.STALE
        return Refresh(state, path, url, error=str(exc), age=age)
    return Refresh(Freshness.FETCHED, path, url, age=0.0)


_TABLES: dict[tuple[str, int, int], dict[str, Rates]] = {}


def load_table(path: Path) -> dict[str, Rates]:
    """The priced models of the copy at ``path`` (parsed once per file version).

    Raises PricingError when the file is missing or not a JSON object.
    """
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        cached = _TABLES.get(key)
        if cached is not None:
            return cached
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PricingError(f"cannot read the price table: {exc} ({path})") from None
    if not isinstance(data, dict):
        raise PricingError(f"the price table {path} is not a JSON object")
    table = parse_table(data)
    _TABLES.clear()
    _TABLES[key] = table
    return table
