"""``fractal open --web``: the dashboard served to a browser by textual-serve.

Not a second UI: each browser that connects gets its own ``fractal open`` process (the
Textual app with textual-serve's web driver), started by this server as the operator who
started it, in the tree's repository, so its keys call the same verbs with the same
authority as in a terminal. textual-serve's aiohttp application is wrapped in one
middleware that refuses every request (page, websocket, static file, download) without
the access token (``domain.webaccess``), and a websocket opened from another site's page.
Imported only for ``--web`` (textual-serve and aiohttp cost about 0.2 s to import).

Each browser's dashboard lives exactly as long as its websocket: it runs as the leader of
a process group of its own (``DashboardSession``), and however the websocket ends (the
tab closed, the browser gone without a word, its connection lost in the middle of a
write, the server stopping) the dashboard is asked to quit, given ``QUIT_S`` seconds, and
its process group is then stopped (``procs.processes.kill_group``). textual-serve alone
waits for the dashboard to quit on its own, which one that stopped being read never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from fractal.assets import asset_root
from fractal.domain import webaccess
from fractal.domain.errors import FractalError
from fractal.procs.processes import GroupHandle, kill_group, process_create_time
from fractal.tree import Tree

log = logging.getLogger(__name__)

SHUTDOWN_S = 3.0
"""Seconds a stopping server gives an open dashboard to quit before its handler is
cancelled."""

QUIT_S = 2.0
"""Seconds a dashboard whose websocket ended is given to quit when asked, before its
process group is stopped."""

KILL_GRACE_S = 1.0
"""Seconds between SIGTERM and SIGKILL when a dashboard's process group is stopped."""

Say = Callable[[str], None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def served_command(tree: Tree, node: str | None) -> str:
    """The shell command textual-serve runs for each browser: ``fractal open`` on ``tree``
    (``node`` selected first), in the tree's repository, with this interpreter."""
    argv = [sys.executable, "-P", "-m", "fractal", "open", "--path", str(tree.repo)]
    if node is not None:
        argv.append(node)
    return f"cd {shlex.quote(str(tree.repo))} && exec {shlex.join(argv)}"


class DashboardSession(AppService):
    """One browser's dashboard process: textual-serve's app service, with the process
    started as the leader of a new session, so its process group (it and whatever it
    started) can be stopped as one (``end_session``)."""

    async def _open_app_process(self, width: int = 80, height: int = 24
                                ) -> asyncio.subprocess.Process:
        """Start the served command (``served_command``) on pipes, ``width`` x ``height``
        cells, in a process group of its own."""
        process = await asyncio.create_subprocess_shell(
            self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
            env=self._build_environment(width=width, height=height))
        assert process.stdin is not None
        self._process, self._stdin = process, process.stdin
        return process

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The dashboard's process once started, else None."""
        return self._process


async def end_session(session: DashboardSession) -> None:
    """End one browser's dashboard: ask it to quit (textual-serve's ``stop``: a quit
    message, then the wait for its output to end), up to ``QUIT_S`` seconds; a dashboard
    still running then (it missed the quit, or it is stuck writing to a pipe nobody reads
    any more) has its process group stopped, TERM then KILL after ``KILL_GRACE_S``. Never
    raises: what went wrong is logged."""
    process = session.process
    created = process_create_time(process.pid) if process is not None else None
    try:
        await asyncio.wait_for(session.stop(), QUIT_S)
    except Exception as exc:  # a lost connection, a timeout: the group is stopped below
        log.debug("dashboard session did not quit cleanly: %r", exc)
    if process is None or created is None or process.returncode is not None:
        return
    try:
        await asyncio.wait_for(process.wait(), QUIT_S)
        return
    except TimeoutError:
        pass
    handle = GroupHandle(pid=process.pid, pgid=process.pid, create_time=created, marker="")
    left = await asyncio.to_thread(kill_group, handle, grace=KILL_GRACE_S)
    if left:
        log.warning("dashboard processes still alive after SIGKILL: %s", left)
    with contextlib.suppress(TimeoutError):  # read what it left, so its pipes close
        await asyncio.wait_for(process.communicate(), QUIT_S)


class DashboardServer(Server):
    """textual-serve's server with fractal's page and the access-token guard.

    ``say`` receives one line per refused request (the CLI prints it on stderr)."""

    def __init__(self, command: str, *, token: str, title: str, say: Say) -> None:
        super().__init__(command, title=title,
                         templates_path=asset_root() / "web")
        self.token = token
        self.say = say
        # A name of this server's own: cookies ignore ports, so two servers on one host (or
        # two tunnels to 127.0.0.1) would overwrite each other's under one name.
        self.cookie = f"{webaccess.COOKIE}_{os.urandom(4).hex()}"

    async def make_app(self) -> web.Application:
        """textual-serve's application (its page, websocket, download and static routes)
        behind the guard, with fractal's page in place of its own."""
        app = await self._make_app()
        app.middlewares.append(self.guard)
        app.on_startup.clear()  # textual-serve's banner: the CLI prints the URL itself
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Pass a request carrying the token (``?token=`` or the cookie) and, for the
        websocket, opened from this server's own page; refuse any other with 401 (no
        token) or 403 (a wrong token, another site's page), logged through ``say``. The
        page's response sets the cookie, so the page's own requests carry the token."""
        given = request.query.get(webaccess.TOKEN_PARAM) or request.cookies.get(self.cookie)
        if not webaccess.token_matches(given, self.token):
            status, why = webaccess.refusal(given)
            return self._refuse(request, status, why)
        if request.path == "/ws" and not webaccess.same_origin(
                request.headers.get("Origin"), request.host):
            return self._refuse(request, 403, "a websocket from another site's page")
        response = await handler(request)
        if request.path == "/" and request.query.get(webaccess.TOKEN_PARAM):
            response.set_cookie(self.cookie, self.token, httponly=True,
                                samesite="Strict", path="/")
        return response

    def _refuse(self, request: web.Request, status: int, why: str) -> web.Response:
        self.say(f"refused {request.method} {request.path} from {request.remote}: {why} "
                 f"({status})")
        return web.Response(status=status, text=(
            f"refused: {why}. Open the URL `fractal open --web` printed (it carries "
            f"?{webaccess.TOKEN_PARAM}=...); a new server has a new token.\n"))

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One browser's websocket (``?width=&height=``: its terminal's cells): a
        dashboard of its own (``DashboardSession``) fed the browser's messages until the
        websocket ends from either side, then ended (``end_session``) whatever ended it."""
        websocket = web.WebSocketResponse(heartbeat=15)
        session: DashboardSession | None = None

        async def close() -> None:  # the dashboard quit: so does its websocket
            await websocket.close()

        try:
            await websocket.prepare(request)
            session = DashboardSession(
                self.command, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                close=close, download_manager=self.download_manager,
                debug=self.debug)
            await session.start(to_int(request.query.get("width", "80"), 80),
                                to_int(request.query.get("height", "24"), 24))
            await self._process_messages(websocket, session)
        except asyncio.CancelledError:  # the server stops: the dashboard goes with it
            await websocket.close()
        except Exception as exc:  # the browser gone mid-message: the session ends below
            log.debug("dashboard websocket ended: %r", exc)
        finally:
            if session is not None:
                await end_session(session)
        return websocket

    @aiohttp_jinja2.template("index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        """fractal's page: its script, styles and websocket on the host the browser asked
        for (so a tunnel's local port works), fetching nothing from elsewhere."""
        origin = f"{request.scheme}://{request.host}"
        scheme = "wss" if request.scheme == "https" else "ws"
        return {
            "title": self.title,
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "static_url": f"{origin}/static/",
            "websocket_url": f"{scheme}://{request.host}/ws",
        }


def open_socket(listen: webaccess.Listen, port: int) -> socket.socket:
    """A listening socket on ``listen.address``:``port`` (0: any free port). Raises
    FractalError when the address cannot be had (a port in use, an address not on this
    machine), saying what to give instead."""
    family = socket.AF_INET6 if ":" in listen.address else socket.AF_INET
    try:
        return socket.create_server((listen.address, port), family=family)
    except OSError as exc:
        raise FractalError(f"cannot listen on {listen.address} port {port}: {exc.strerror}; "
                           f"give another port with --port N (0: any free one)") from None


def page_url(listen: webaccess.Listen, sock: socket.socket, token: str) -> str:
    """The URL to open: the listening address (this machine's name for an unspecified
    one such as 0.0.0.0), the port and the token."""
    host = listen.address
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    port = sock.getsockname()[1]
    return f"http://{host}:{port}/?{webaccess.TOKEN_PARAM}={token}"


def serve(tree: Tree, node: str | None, listen: webaccess.Listen, sock: socket.socket,
          token: str, *, say: Say) -> None:
    """Serve the dashboard of ``tree`` on ``sock`` until SIGINT or SIGTERM. The served
    dashboards get this process's environment less ``TMUX`` (the browser has no tmux
    client of its own to switch)."""
    for name in ("TMUX", "TMUX_PANE"):
        os.environ.pop(name, None)
    server = DashboardServer(served_command(tree, node), token=token,
                             title=f"fractal: {tree.root}", say=say)
    asyncio.run(_run(server, sock))


async def _run(server: DashboardServer, sock: socket.socket) -> None:
    app = await server.make_app()
    runner = web.AppRunner(app, handle_signals=False, access_log=None,
                           shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()

