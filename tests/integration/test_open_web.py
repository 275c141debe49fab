"""``fractal open --web`` as a real server process: the URL it prints, the requests it
refuses (no token, a wrong token, another site's websocket) and logs, and the addresses
it will not listen on. HTTP through urllib; the browser itself is the e2e tier's
(``tests/e2e/test_dashboard_web.py``)."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import served
from tests.helpers import copy_of_tree, make_repo
from tests.trees import run_cli

pytest.importorskip("textual_serve", reason="the web extra (fractal[web]) is not installed")


def _build(repo: Path) -> None:
    make_repo(repo)
    run_cli(["init"], repo)
    run_cli(["node", "init", "feat"], repo)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    yield copy_of_tree(tmp_path / "repo", "open-web", _build)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, body, Set-Cookie) of a GET to ``url``."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return (response.status, response.read().decode(),
                    response.headers.get("Set-Cookie", ""))
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), ""


def test_only_the_printed_url_opens_the_dashboard(repo: Path) -> None:
    with served(repo) as web:
        assert web.url.startswith("http://127.0.0.1:")
        token = web.url.split("token=", 1)[1]
        assert len(token) == 32

        status, body, _ = _get(web.base)
        assert status == 401 and "no access token" in body and "fractal open --web" in body
        status, body, _ = _get(f"{web.base}?token={'0' * 32}")
        assert status == 403 and "a wrong access token" in body
        for path in ("ws", "static/js/textual.js", "download/x"):  # every route is guarded
            assert _get(f"{web.base}{path}")[0] == 401, path

        status, page, cookie = _get(web.url)
        assert status == 200 and "/ws" in page and "googleapis" not in page
        name = re.search(r"(fractal_token_[0-9a-f]{8})=" + token, cookie)
        assert name is not None and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = {"Cookie": f"{name[1]}={token}"}
        assert _get(f"{web.base}static/js/textual.js", {"Cookie": f"fractal_token={token}"}
                    )[0] == 401  # another server's cookie name carries nothing here
        assert _get(f"{web.base}static/js/textual.js", jar)[0] == 200  # the page's script
        other_site = {**jar, "Origin": "http://evil.example", "Connection": "Upgrade",
                      "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
        status, body, _ = _get(f"{web.base}ws", other_site)
        assert status == 403 and "another site" in body
    log = web.stderr()
    assert "refused GET / from 127.0.0.1: no access token (401)" in log
    assert "refused GET / from 127.0.0.1: a wrong access token (403)" in log
    assert "refused GET /ws from 127.0.0.1: a websocket from another site's page (403)" in log
    assert token not in log
    assert web.proc.returncode == 0  # SIGTERM stops it cleanly


def test_a_bind_beyond_loopback_says_the_token_is_still_required(repo: Path) -> None:
    with served(repo, "--bind", "0.0.0.0") as web:
        port = web.base.rstrip("/").rsplit(":", 1)[1]
        assert _get(f"http://127.0.0.1:{port}")[0] == 401
        assert _get(f"http://127.0.0.1:{port}/?{web.url.split('?', 1)[1]}")[0] == 200
    assert "listening on 0.0.0.0" in web.stderr()
    assert "needs the access token" in web.stderr()


@pytest.mark.parametrize(("args", "says"), [
    (["--web", "--port", "0.0.0.0:8765"], "give it to --bind"),
    (["--web", "--bind", "example.com"], "--bind takes an IP address"),
    (["--port", "8765"], "--port and --bind go with --web"),
    (["--bind", "0.0.0.0"], "--port and --bind go with --web"),
])
def test_only_bind_moves_the_server_off_loopback(repo: Path, args: list[str],
                                                 says: str) -> None:
    done = run_cli(["open", *args], repo, check=False)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and done.stdout == ""


def test_a_port_in_use_is_refused_with_what_to_do(repo: Path) -> None:
    with served(repo) as web:
        port = web.base.rstrip("/").rsplit(":", 1)[1]
        done = run_cli(["open", "--web", "--port", port], repo, check=False)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1 port {port}" in done.stderr
    assert "--port N (0: any free one)" in done.stderr


def test_without_a_terminal_the_refusal_names_the_web_dashboard(repo: Path) -> None:
    done = run_cli(["open"], repo, check=False)
    assert done.returncode == 1 and "fractal open --web" in done.stderr


def test_without_the_web_extra_the_refusal_names_it(repo: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from fractal.cli.open import open_cmd

    monkeypatch.setitem(sys.modules, "fractal.tui.web", None)  # as if textual-serve were absent
    done = CliRunner().invoke(open_cmd, ["--web", "--path", str(repo)])
    assert done.exit_code == 1
    assert "pip install 'fractal[web]'" in str(done.exception)
