"""The console's pages and safety without a broker (Starlette's TestClient in this process):
read-only mode, the login, CSRF, security headers, local assets, and clear messages when the
cluster cannot be reached. Nothing here may show a secret of the properties file."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from brook.console.app import ConsoleSettings, create_app
from brook.console.backend import Backend
from brook.console.safety import CSRF_COOKIE, Users
from brook.security.client_settings import ClientSecurity
from tests.support.broker_harness import free_port

SECRET = "hunter2-very-secret"
STATIC = Path(__file__).parents[2] / "src" / "brook" / "console"


def client(read_only=False, users=Users(), security=None) -> TestClient:
    security = security or ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "console", "sasl.password": SECRET})
    # nothing listens on the port: every page that asks the cluster gets "cannot connect"
    backend = Backend(f"127.0.0.1:{free_port()}", 2.0, security)
    app = create_app(backend, ConsoleSettings(read_only=read_only, users=users))
    return TestClient(app, raise_server_exceptions=False)


def token(page_html: str) -> str:
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', page_html).group(1)


def test_an_unreachable_cluster_is_a_message_not_a_trace():
    c = client()
    for path in ("/groups", "/groups/g1", "/offsets-topic", "/cluster", "/topics",
                 "/topics/orders", "/topics/orders/messages", "/offsets-topic/0",
                 "/cluster/brokers/1", "/reset/g1?to=earliest", "/security"):
        r = c.get(path)
        assert r.status_code == 502, path
        assert "cannot connect to a broker at 127.0.0.1:" in r.text, path
        assert "Traceback" not in r.text and "File \"" not in r.text
        assert SECRET not in r.text


def test_the_connection_is_named_without_its_password():
    r = client().get("/groups")
    assert "SCRAM-SHA-512 as console" in r.text
    assert SECRET not in r.text


@pytest.mark.parametrize("path,status,message", [
    ("/topics/bad%20name", 400, "is not a topic name"),
    ("/topics/orders/messages?offset=-3", 400, "offset must be 0 or more, not -3"),
    ("/topics/orders/messages?format=xml", 400, "format is one of"),
    ("/topics/orders/messages?time=yesterday", 400, "is not a time"),
    ("/reset/g1?to=offset&value=-5", 400, "an offset is 0 or more"),
    ("/reset/g1?to=offset&value=abc", 400, "must be a whole number"),
    ("/reset/g1?to=sideways", 400, "unknown reset"),
    ("/reset/g1?to=earliest&scope=topics", 400, "name the partitions"),
    ("/nowhere", 404, "No page at /nowhere"),
])
def test_bad_input_gets_a_clear_message(path, status, message):
    r = client().get(path)
    assert r.status_code == status and message in r.text


def test_read_only_hides_changes_and_refuses_a_hand_made_post():
    c = client(read_only=True)
    r = c.get("/groups")
    assert "read-only" in r.text
    for path in ("/topics", "/reset/g1", "/delete-group/g1", "/delete-offsets/g1",
                 "/topics/orders/delete", "/topics/orders/messages", "/topics/orders/configs",
                 "/topics/orders/partitions", "/groups", "/anything"):
        r = c.post(path, data={"confirm": "g1"})
        assert r.status_code == 403, path
        assert "read-only" in r.text


def test_a_change_without_the_right_token_is_refused():
    c = client()
    page = c.get("/groups")  # sets the cookie; the form token is HMAC(secret, cookie nonce)
    assert CSRF_COOKIE in page.cookies
    r = c.post("/topics", data={"name": "x"})
    assert r.status_code == 403 and "security token" in r.text
    r = c.post("/topics", data={"name": "x", "csrf_token": "0" * 64})
    assert r.status_code == 403


def test_a_change_from_another_site_is_refused():
    from brook.console.safety import csrf_token

    c = client()
    c.get("/groups")
    good = csrf_token(_secret(c), c.cookies[CSRF_COOKIE])
    r = c.post("/topics", data={"name": "x", "csrf_token": good},
               headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "another site" in r.text


def test_a_change_with_its_token_reaches_the_cluster():
    from brook.console.safety import csrf_token

    c = client()
    c.get("/topics")  # the page fails (no cluster), but the cookie is set
    nonce = c.cookies[CSRF_COOKIE]
    r = c.post("/topics", data={"name": "x", "csrf_token": csrf_token(_secret(c), nonce)})
    assert r.status_code == 502 and "cannot connect" in r.text  # through to the cluster


def _secret(c: TestClient) -> bytes:
    """The console's CSRF secret, from its Guard middleware."""
    app = c.app.middleware_stack
    while app is not None:
        settings = getattr(app, "settings", None)
        if settings is not None:
            return settings.secret
        app = getattr(app, "app", None)
    raise AssertionError("no Guard")


def test_login_is_required_with_basic_auth():
    c = client(users=Users.parse("alice:pw\n"))
    r = c.get("/groups")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
    r = c.get("/static/console.css")
    assert r.status_code == 401  # assets too
    good = "Basic " + base64.b64encode(b"alice:pw").decode()
    bad = "Basic " + base64.b64encode(b"alice:nope").decode()
    assert c.get("/groups", headers={"authorization": bad}).status_code == 401
    assert c.get("/groups", headers={"authorization": good}).status_code == 502  # in: no cluster


def test_security_headers_and_the_csrf_cookie():
    r = client().get("/groups")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_assets_are_served_from_the_package_with_their_licenses():
    c = client()
    for path, marker in (("/static/vendor/htmx-2.0.11.min.js", "htmx 2.0.11"),
                         ("/static/vendor/uPlot-1.6.32.iife.min.js", "uPlot 1.6.32"),
                         ("/static/vendor/uPlot-1.6.32.min.css", "uPlot 1.6.32"),
                         ("/static/vendor/LICENSE-htmx.txt", "Zero-Clause BSD"),
                         ("/static/vendor/LICENSE-uPlot.txt", "MIT License"),
                         ("/static/console.js", "brook console"),
                         ("/static/console.css", "prefers-color-scheme")):
        r = c.get(path)
        assert r.status_code == 200 and marker in r.text, path


def test_pages_load_nothing_from_another_site():
    for template in (STATIC / "templates").glob("*.html"):
        text = template.read_text()
        for m in re.finditer(r'(?:src|href)="([^"{]+)"', text):
            assert m.group(1).startswith(("/", "#")), (template.name, m.group(1))
        assert "<script>" not in text and "onclick" not in text and "javascript:" not in text


@pytest.mark.parametrize("listen,expected", [("127.0.0.1:8080", ("127.0.0.1", 8080)),
                                             (":9000", ("127.0.0.1", 9000)),
                                             ("[::1]:0", ("::1", 0))])
def test_listen_addresses(listen, expected):
    from brook.console.command import is_loopback, parse_listen

    assert parse_listen(listen) == expected
    assert is_loopback(expected[0])
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")


def test_every_control_has_a_label():
    for template in (STATIC / "templates").glob("*.html"):
        text = template.read_text()
        labelled = set(re.findall(r'<label for="([^"]+)"', text))
        for m in re.finditer(r"<(input|select|textarea)\b([^>]*)>", text):
            attrs = m.group(2)
            if 'type="hidden"' in attrs:
                continue
            wrapped = text.rfind("<label", 0, m.start()) > text.rfind("</label>", 0, m.start())
            found = re.search(r'id="([^"]+)"', attrs)
            assert wrapped or (found and found.group(1) in labelled), (template.name, m.group(0))


def test_the_console_listens_on_loopback_unless_told_otherwise():
    import inspect

    from brook.console.command import DEFAULT_LISTEN, console, is_loopback, parse_listen

    default = inspect.signature(console).parameters["listen"].default.default
    assert default == DEFAULT_LISTEN == "127.0.0.1:8080"
    assert is_loopback(parse_listen(default)[0])
