"""Body caps on the bytes actually received (issue 21, defect 7), through real servers:
Daphne (as `claw up` runs it) and uvicorn (the ASGI middleware alone), with chunked
bodies, a declared length and no length at all. A webhook body over 64 KB, an OpenAI
request over the API's cap, a 20 MB body anywhere under /api/, a chat form or an
admin form over theirs: 413, in the route's error shape, and nothing is stored."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents.models import Run, Session
from claw_platform.cli.up import web_server_command
from tests.api.conftest import make_key
from tests.api.server import live_asgi_server
from tests.platform.test_cli_chat import database_url_for_tests
from tests.ui.conftest import free_port, start, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KB = 1024


@pytest.fixture(scope="module")
def daphne(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("body-caps")
    port = free_port()
    env = {"DATABASE_URL": database_url_for_tests(), "CHANNEL_LAYER_URL": "postgres", "LOG_LEVEL": "WARNING"}
    web = start(web_server_command("127.0.0.1", port), env, logs / "web.log")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or web.poll() is not None:
            stop(web)
            pytest.fail("Daphne did not start:\n" + (logs / "web.log").read_text()[-3000:])
        time.sleep(0.2)
    try:
        yield url
    finally:
        stop(web)
        log = (logs / "web.log").read_text()
        assert "Traceback" not in log, log[-3000:]


@pytest.fixture(params=["daphne", "uvicorn"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "daphne":
        yield request.getfixturevalue("daphne")
    else:
        with live_asgi_server() as url:
            yield url


def chunks(total: int, size: int = 16 * KB, head: bytes = b"", tail: bytes = b"") -> Iterator[bytes]:
    """A body of ``total`` bytes as chunks (httpx sends a generator chunked)."""
    yield head
    left = total - len(head) - len(tail)
    while left > 0:
        yield b"x" * min(size, left)
        left -= size
    yield tail


def json_message(total: int, field: str = "message") -> tuple[bytes, bytes]:
    """Head and tail of a JSON object whose ``field`` is padded out to ``total`` bytes."""
    return f'{{"{field}": "'.encode(), b'"}'


def post_chunked(url: str, total: int, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
    head, tail = json_message(total)
    return httpx.post(
        url, content=chunks(total, head=head, tail=tail), headers=headers or {}, timeout=60, **kw
    )


def assert_api_413(response: httpx.Response, cap: int) -> None:
    assert response.status_code == 413, response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body == {
        "error": {
            "code": "payload_too_large",
            "message": f"The request body is over {cap:,} bytes.",
            "fields": {},
        }
    }


def test_a_chunked_webhook_body_over_64_kb_is_refused(server, live_agent):
    key = make_key(live_agent, "write")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    response = post_chunked(f"{server}/api/v1/hooks/assistant/", 99 * KB, headers)
    assert_api_413(response, 64 * KB)
    assert not Run.objects.unscoped().filter(tenant=live_agent.tenant, session__channel="webhook").exists()
    # Under the cap, chunked too, the hook takes it (async: no waiting for the run).
    small = httpx.post(
        f"{server}/api/v1/hooks/assistant/",
        content=chunks(2 * KB, head=b'{"mode": "async", "message": "', tail=b'"}'),
        headers=headers,
        timeout=60,
    )
    assert small.status_code == 202, small.text[:300]


def test_a_chunked_openai_request_over_the_api_cap_is_refused_in_openais_shape(server, live_agent, settings):
    key = make_key(live_agent, "write")
    response = httpx.post(
        f"{server}/v1/chat/completions",
        content=chunks(
            2 * 1024 * KB,
            head=b'{"model": "assistant", "messages": [{"role": "user", "content": "',
            tail=b'"}]}',
        ),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["code"] == "payload_too_large"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert not Session.objects.unscoped().filter(tenant=live_agent.tenant, channel="openai").exists()


def test_20_mb_under_the_api_is_a_json_413_not_an_html_page(server, live_agent):
    key = make_key(live_agent, "write")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    before = Session.objects.unscoped().filter(tenant=live_agent.tenant).count()
    chunked = post_chunked(f"{server}/api/v1/sessions/", 20 * 1024 * KB, headers)
    assert_api_413(chunked, 1024 * KB)
    # The same with a declared length: refused on the header.
    head, tail = json_message(20 * 1024 * KB)
    declared = httpx.post(
        f"{server}/api/v1/sessions/",
        content=head + b"x" * (20 * 1024 * KB - len(head) - len(tail)) + tail,
        headers=headers,
        timeout=60,
    )
    assert_api_413(declared, 1024 * KB)
    assert Session.objects.unscoped().filter(tenant=live_agent.tenant).count() == before


def test_a_declared_length_over_the_cap_is_answered_before_the_body_is_sent(server, live_agent):
    """A client that claims 50 MB and sends nothing (a lying length) is answered at
    once, from the headers alone."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(
            b"POST /api/v1/hooks/assistant/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n"
        )
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = raw.recv(65536)
            if not data:
                break
            answer += data
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert waited < 30  # answered without the 50 MB (the socket's timeout would say otherwise)


def test_chat_and_admin_forms_have_caps_of_their_own(server, live_agent):
    login = httpx.post(
        f"{server}/chat/login/",
        content=chunks(100 * KB, head=b"username=a&password="),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=60,
    )
    assert login.status_code == 413, login.text[:200]
    assert login.headers["content-type"].startswith("text/plain")
    admin = httpx.post(
        f"{server}/admin/login/",
        content=chunks(3 * 1024 * KB, head=b"username=a&password="),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=60,
    )
    assert admin.status_code == 413, admin.text[:200]
    # Under their caps, the forms are served as usual (CSRF refuses this one).
    assert (
        httpx.post(
            f"{server}/chat/login/",
            content=chunks(10 * KB, head=b"username=a&password="),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            timeout=60,
        ).status_code
        == 403
    )


def test_a_chunked_body_is_stopped_at_the_cap_without_waiting_for_its_end(server, live_agent):
    """Daphne's Twisted used to receive a whole body (spooled to a temporary file)
    before the application heard of the request: a chunked upload that goes on and on
    was read to its end. Now the server answers once the cap is passed, while the
    client has not finished (never finishes) its body."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(
            b"POST /api/v1/hooks/assistant/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * (16 * KB)
        for _ in range(6):  # 96 KB, and no terminating chunk
            raw.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = raw.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_each_route_has_its_cap():
    from claw_platform.body_limit import body_cap

    assert body_cap("/api/v1/hooks/assistant/") == 64 * KB
    assert body_cap("/api/v1/pair/") == 4 * KB
    assert body_cap("/api/v1/sessions/") == 1024 * KB
    # Image requests have their own cap; one without images is held to the API's after reading.
    assert body_cap("/v1/chat/completions") == 16 * 1024 * KB
    assert body_cap("/chat/s/6f1c2d1e-0000-4000-8000-000000000000/attachments/") == 10 * 1024 * KB
    assert body_cap("/admin/login/") == 2_621_440
    assert body_cap("/chat/login/") == 64 * KB
    assert body_cap("/nowhere") == 64 * KB
