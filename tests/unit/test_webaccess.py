"""The served dashboard's access rules (``fractal/domain/webaccess.py``): where it may
listen, the port, the token and the websocket's origin."""

from __future__ import annotations

import pytest

from fractal.domain import webaccess
from fractal.domain.webaccess import Listen


@pytest.mark.parametrize(("bind", "listen"), [
    (None, Listen("127.0.0.1", True)),
    ("localhost", Listen("127.0.0.1", True)),
    ("127.0.0.2", Listen("127.0.0.2", True)),
    ("::1", Listen("::1", True)),
    ("[::1]", Listen("::1", True)),
    ("0.0.0.0", Listen("0.0.0.0", False)),
    ("192.0.2.7", Listen("192.0.2.7", False)),
    ("::", Listen("::", False)),
])
def test_the_listening_address(bind: str | None, listen: Listen) -> None:
    assert webaccess.listen_on(bind) == listen


@pytest.mark.parametrize("bind", ["example.com", "0.0.0.0:8765", "", "300.1.1.1"])
def test_a_bind_that_is_not_an_address_is_refused(bind: str) -> None:
    with pytest.raises(ValueError, match="--bind takes an IP address"):
        webaccess.listen_on(bind)


@pytest.mark.parametrize(("text", "port"), [("8765", 8765), ("0", 0), (" 65535 ", 65535)])
def test_the_port(text: str, port: int) -> None:
    assert webaccess.port_number(text) == port


@pytest.mark.parametrize(("text", "says"), [
    ("0.0.0.0:8765", "give it to --bind"),  # only --bind moves the server off loopback
    ("[::]:80", "give it to --bind"),
    ("65536", "from 0 to 65535"),
    ("-1", "takes a port number"),
    ("http", "takes a port number"),
])
def test_a_port_that_is_not_a_number_is_refused(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        webaccess.port_number(text)


@pytest.mark.parametrize(("given", "matches", "refusal"), [
    ("a" * 32, True, None),
    (None, False, (401, "no access token")),
    ("", False, (401, "no access token")),
    ("a" * 31, False, (403, "a wrong access token")),
    ("b" * 32, False, (403, "a wrong access token")),
])
def test_the_token(given: str | None, matches: bool,
                   refusal: tuple[int, str] | None) -> None:
    assert webaccess.token_matches(given, "a" * 32) is matches
    if refusal is not None:
        assert webaccess.refusal(given) == refusal


@pytest.mark.parametrize(("origin", "host", "same"), [
    (None, "127.0.0.1:8765", True),
    ("http://127.0.0.1:8765", "127.0.0.1:8765", True),
    ("http://LOCALHOST:9000", "localhost:9000", True),
    ("http://127.0.0.1:8766", "127.0.0.1:8765", False),
    ("https://evil.example", "127.0.0.1:8765", False),
    ("null", "127.0.0.1:8765", False),
])
def test_the_websocket_origin(origin: str | None, host: str, same: bool) -> None:
    assert webaccess.same_origin(origin, host) is same


def test_only_a_bind_beyond_loopback_is_announced() -> None:
    url = "http://host:8765/?token=t"
    assert webaccess.bind_notice(Listen("127.0.0.1", True), url) is None
    notice = webaccess.bind_notice(Listen("0.0.0.0", False), url)
    assert notice is not None and "access token" in notice and url in notice
