"""``fractal open --web``: the dashboard served to a browser by textual-serve.

Not a second UI: each browser that connects gets its own ``fractal open`` process (the
Textual app with textual-serve's web driver), started by this server as the operator who
started it, in the tree's repository, so its keys call the same verbs with the same
authority as in a terminal. textual-serve's aiohttp application is wrapped in one
middleware that refuses every request (page, websocket, static file, download) without
the access token (``domain.webaccess``), and a websocket opened from another site's page.
Imported only for ``--web`` (textual-serve and aiohttp cost about 0.2 s to import).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from textual_serve.server import Server, to_int

from fractal.assets import asset_root
from fractal.domain import webaccess
from fractal.domain.errors import FractalError
from fractal.tree import Tree

SHUTDOWN_S = 3.0
"""Seconds a stopping server gives an open dashboard to quit before its handler is
cancelled."""

Say = Callable[[str], None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def served_command(tree: Tree, node: str | None) -> str:
    """The shell command textual-serve runs for each browser: ``fractal open`` on ``tree``
    (``node`` selected first), in the tree's repository, with this interpreter."""
    argv = [sys.executable, "-P", "-m", "fractal", "open", "--path", str(tree.repo)]
    if node is not None:
        argv.append(node)
    return f"cd {shlex.quote(str(tree.repo))} && exec {shlex.join(argv)}"


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

