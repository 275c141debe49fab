"""A headless Chromium driven over the DevTools protocol, for tests of pages a person sees.

``chromium()`` finds Debian's ``chromium`` (installing it with apt-get when absent and
this is root; otherwise it returns why not, for a skip). ``Browser`` starts it on a
private profile with loopback-only networking and speaks CDP to its one page over a
websocket (``websocket-client``): navigate, size the window, evaluate JavaScript, press
keys, take screenshots. No webdriver, no browser download.

For textual-serve's page, ``TERMINAL_HOOK`` (run before the page's own scripts) keeps a
reference to each xterm.js terminal the page creates, so ``Browser.screen_text`` reads
the characters on screen from the terminal's buffer: what a person sees, without OCR.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import SCALE, wait_until

INSTALL_TIMEOUT = 280.0
"""Seconds one apt-get call may take (a first install of chromium downloads ~100 MiB)."""

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
    "--hide-scrollbars", "--remote-debugging-port=0", "--remote-allow-origins=*",
    # Names resolve to nothing but loopback: the page can reach only the test's server.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
)

TERMINAL_HOOK = """
Object.defineProperty(Object.prototype, 'terminal', {
  configurable: true,
  get() { return undefined; },
  set(value) {
    Object.defineProperty(this, 'terminal',
      {value, writable: true, configurable: true, enumerable: true});
    if (value && value.buffer && typeof value.write === 'function') {
      (window.__terminals = window.__terminals || []).push(value);
    }
  },
});
"""

SCREEN_JS = """
(() => {
  const term = (window.__terminals || [])[0];
  if (!term) return null;
  const buf = term.buffer.active, lines = [];
  for (let i = 0; i < term.rows; i++) {
    const line = buf.getLine(buf.viewportY + i);
    lines.push(line ? line.translateToString(true, 0, term.cols) : '');
  }
  return {cols: term.cols, rows: term.rows, text: lines.join('\\n')};
})()
"""


def chromium() -> tuple[str | None, str]:
    """(path, '') of Debian's chromium, installed with apt-get when absent and this
    process is root; (None, why) when it cannot be had. One install per machine at a
    time (a lock file beside the system's temporary directory)."""
    found = shutil.which("chromium")
    if found:
        return found, ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "chromium is not installed and apt-get cannot install it here (not root)"
    lock = Path(tempfile.gettempdir()) / "fractal-chromium-install.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not shutil.which("chromium"):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            wait = ["-o", "DPkg::Lock::Timeout=120"]  # another apt-get may hold the lock
            for argv in (["apt-get", *wait, "install", "-y", "-qq", "chromium"],
                         ["apt-get", *wait, "update", "-qq"],
                         ["apt-get", *wait, "install", "-y", "-qq", "chromium"]):
                done = subprocess.run(argv, env=env, capture_output=True, text=True,
                                      timeout=INSTALL_TIMEOUT, check=False)
                if "install" in argv and done.returncode == 0:
                    break
            else:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
                return None, f"apt-get install chromium failed: {' '.join(tail)}"
    found = shutil.which("chromium")
    return (found, "") if found else (None, "apt-get installed no chromium")


class Browser:
    """One headless chromium with one page, driven over CDP. ``close`` ends it."""

    def __init__(self, executable: str, profile: Path) -> None:
        import websocket  # websocket-client: imported only by the tests that drive a browser

        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a reused profile's is stale
        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            wait_until(lambda: port_file.exists() and port_file.read_text().strip(),
                       timeout=30, message="chromium's DevTools port")
            port = int(port_file.read_text().split()[0])
            pages = wait_until(lambda: [t for t in self._targets(port) if t["type"] == "page"],
                               timeout=10, message="chromium's first page")
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"],
                                                  timeout=30 * SCALE, suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Page.addScriptToEvaluateOnNewDocument", source=TERMINAL_HOOK)

    @staticmethod
    def _targets(port: int) -> list[dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                return list(json.load(r))
        except OSError:
            return []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events meanwhile are kept in
        ``events``). Raises RuntimeError with the browser's error."""
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self.events.append(message)
            del self.events[:-200]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def size(self, width: int, height: int, *, mobile: bool = False) -> None:
        """Make the page ``width`` x ``height`` CSS pixels (a phone with ``mobile``)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=mobile)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screen_text(self) -> str:
        """The characters on the page's terminal, one line per row ('' before it exists)."""
        screen = self.evaluate(SCREEN_JS)
        return str(screen["text"]) if screen else ""

    def terminal_size(self) -> tuple[int, int]:
        """(columns, rows) of the page's terminal ((0, 0) before it exists)."""
        screen = self.evaluate(SCREEN_JS)
        return (int(screen["cols"]), int(screen["rows"])) if screen else (0, 0)

    def press(self, key: str) -> None:
        """Type one printable ``key`` into the focused terminal, as a keyboard would."""
        self.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        code = f"Key{key.upper()}" if key.isalpha() else ""
        vk = ord(key.upper())
        self.call("Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key,
                  windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)
        self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code,
                  windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the browser and its renderers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue


def wait_for_text(browser: Browser, *words: str, timeout: float = 30.0) -> str:
    """The page's terminal text once it holds every one of ``words``."""
    last = [""]

    def shows() -> str | None:
        last[0] = browser.screen_text()
        return last[0] if all(w in last[0] for w in words) else None

    try:
        return wait_until(shows, timeout=timeout, message=f"the page showing {words}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the page shows:\n{last[0]}") from None



@dataclass
class Served:
    """A running ``fractal open --web``: its process, the URL it printed (with the
    token) and the file its stderr goes to."""

    proc: subprocess.Popen[str]
    url: str
    log: Path

    @property
    def base(self) -> str:
        """The URL without its token (``http://127.0.0.1:PORT/``)."""
        return self.url.split("?", 1)[0]

    def stderr(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def served(repo: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``fractal open --web --port 0 ARGS`` in ``repo`` as a real process until the block
    ends, then SIGTERM and its exit (its served dashboards quit with it)."""
    log = repo.parent / f"web-{os.getpid()}-{time.monotonic_ns()}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fractal", "open", "--web", "--port", "0", *args],
            cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=err, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            proc.wait(timeout=30)
            raise AssertionError(f"fractal open --web printed {url!r}, exit "
                                 f"{proc.returncode}: {log.read_text()}")
        yield Served(proc, url, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30 * SCALE)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
