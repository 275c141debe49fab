"""Who may reach the dashboard served to a browser (``fractal open --web``).

The served dashboard acts as the operator who started it, so every request must carry
the access token minted for that one server: in the URL's ``token`` parameter (the URL
``fractal open --web`` prints) or in the cookie the first page sets, which is how the
page's own requests (its script, its websocket) carry it. The server listens on
127.0.0.1 unless ``--bind`` names another address; nothing else moves it.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import NamedTuple
from urllib.parse import urlsplit

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_PARAM = "token"
"""The URL query parameter that carries the token."""
COOKIE = "fractal_token"
"""The prefix of the cookie the dashboard's page sets so its websocket and static files
carry the token (each server adds an id of its own)."""


class Listen(NamedTuple):
    """Where the server listens: ``address`` (an IP address) and whether it is loopback
    (reachable only from this machine)."""

    address: str
    loopback: bool


def listen_on(bind: str | None) -> Listen:
    """The address for ``--bind`` (None: 127.0.0.1). ``localhost`` means 127.0.0.1; any
    other value must be an IPv4 or IPv6 address. Raises ValueError saying why and what to
    give instead."""
    if bind is None or bind.strip().lower() == "localhost":
        return Listen(DEFAULT_BIND, True)
    try:
        address = ipaddress.ip_address(bind.strip().strip("[]"))
    except ValueError:
        raise ValueError(f"--bind takes an IP address (such as 127.0.0.1 or 0.0.0.0), "
                         f"not {bind!r}") from None
    return Listen(str(address), address.is_loopback)


def port_number(text: str) -> int:
    """The port for ``--port``: a number from 0 to 65535 (0: any free port). An address
    (``0.0.0.0:8765``) is refused: only ``--bind`` moves the server off loopback. Raises
    ValueError saying why and what to give instead."""
    value = text.strip()
    if ":" in value or not value.isdigit():
        hint = (" (to listen on another address give it to --bind; the access token is "
                "still required)") if ":" in value else ""
        raise ValueError(f"--port takes a port number, not {text!r}{hint}")
    port = int(value)
    if port > 65535:
        raise ValueError(f"--port takes a port number from 0 to 65535, not {port}")
    return port


def token_matches(given: str | None, token: str) -> bool:
    """True when ``given`` is exactly ``token`` (compared in constant time; None or an
    empty string never matches)."""
    return bool(given) and hmac.compare_digest(str(given).encode(), token.encode())


def refusal(given: str | None) -> tuple[int, str]:
    """The HTTP status and the reason for a request whose token did not match: 401 when it
    carried none, 403 when it carried a wrong one."""
    if not given:
        return 401, "no access token"
    return 403, "a wrong access token"


def same_origin(origin: str | None, host: str) -> bool:
    """True when a websocket's ``Origin`` header names the page's own ``host`` (host:port
    as the request's Host header gives it), or when there is none (not a browser page).
    A page from another site must not drive the dashboard with the operator's cookie."""
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == host.lower()


def bind_notice(listen: Listen, url: str) -> str | None:
    """What to say when the server listens beyond this machine (None on loopback)."""
    if listen.loopback:
        return None
    return (f"listening on {listen.address}: anyone who can reach this machine can try; "
            f"each request needs the access token in {url}, and the traffic is plain HTTP "
            f"(an SSH tunnel to a loopback bind is safer)")
