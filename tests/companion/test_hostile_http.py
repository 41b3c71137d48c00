"""Issue 24, point 6 and the client that leaves: raw sockets against the companion served
with ``veil serve``'s uvicorn settings; WebSocket handshakes get the HTTP checks."""

from __future__ import annotations

import socket
import time

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from tests.companion.fakes import free_port
from tests.companion.hostile import plain_app, serve_like_veil, text_bomb_pdf

TIMEOUT = 1.0  # header_timeout_s in these tests


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    home = tmp_path_factory.mktemp("home")
    app = plain_app(  # a text bomb that is slow to read (not refused by its ratio)
        home,
        port=port,
        header_timeout_s=TIMEOUT,
        max_document_chars=50_000_000,
        max_compression_ratio=1e9,
    )
    with serve_like_veil(app, port) as url:
        yield url, port, app.state.token


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed."""
    started = time.monotonic()
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


def test_a_connection_that_sends_nothing_is_closed_within_the_header_timeout(server):
    """No bytes at all: closed after header_timeout_s (uvicorn alone holds it for ever)."""
    _url, port, _token = server
    with _connect(port) as sock:
        data, after = _read_until_closed(sock)
    assert data == b"" and after < TIMEOUT + 2.0


def test_headers_that_never_finish_are_closed_with_408(server):
    """A request line and one header, then silence: 408 and closed within the timeout."""
    _url, port, _token = server
    with _connect(port) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        data, after = _read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 ") and after < TIMEOUT + 2.0


def test_a_slow_trickle_of_headers_does_not_keep_the_connection(server):
    """One header line every 0.3 s (each byte used to reset nothing): closed at the timeout."""
    _url, port, _token = server
    started = time.monotonic()
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        closed = False
        for i in range(20):
            time.sleep(0.3)
            try:
                sock.sendall(b"X-Slow-%d: 1\r\n" % i)
            except OSError:
                closed = True
                break
        if not closed:
            _read_until_closed(sock)
    assert time.monotonic() - started < TIMEOUT + 3.0


def test_a_100_kb_header_gets_431_and_the_connection_closed(server):
    """A 100 KB header is refused before the parser takes it."""
    _url, port, _token = server
    with _connect(port) as sock:
        sock.sendall(
            f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: ".encode()
            + b"a" * 100_000
            + b"\r\n\r\n"
        )
        data, _after = _read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 431 ")
    assert b"max_header_bytes" in data


def test_keep_alive_requests_still_work_one_after_another(server):
    """Two requests on one connection, the second after a pause under the timeout."""
    _url, port, _token = server
    request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    with _connect(port) as sock:
        for _ in range(2):
            sock.sendall(request)
            reply = sock.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
            time.sleep(TIMEOUT * 0.6)


def test_a_large_body_after_small_headers_is_not_counted_as_headers(server):
    """A 200 KB JSON body in the same packets as its headers is not a 431."""
    _url, port, token = server
    body = b'{"query": "' + b"a" * 200_000 + b'"}'
    with _connect(port) as sock:
        sock.sendall(
            f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data, _after = _read_until_closed(sock)
    assert not data.startswith(b"HTTP/1.1 431"), data[:300]


def _parse_workers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "parse_worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def _multipart(name: str, data: bytes) -> tuple[bytes, bytes]:
    boundary = b"veilboundary0123456789"
    body = (
        b"--" + boundary + b"\r\n"
        b'Content-Disposition: form-data; name="files"; filename="' + name.encode() + b'"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
        b"--" + boundary + b"--\r\n"
    )
    return boundary, body


def _documents(url: str, token: str) -> list:
    return httpx.get(
        f"{url}/v1/documents", headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).json()


def test_a_client_that_leaves_mid_upload_stores_nothing(server):
    """Half a 300 KB multipart body, then the socket closes: nothing stored, server fine."""
    url, port, token = server
    boundary, body = _multipart("half.txt", b"gout " * 60_000)
    with _connect(port) as sock:
        sock.sendall(
            f"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary.decode()}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
        time.sleep(0.3)
    time.sleep(0.5)
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    assert _documents(url, token) == []


def test_a_client_that_leaves_while_its_file_is_read_kills_the_parser(server):
    """A whole upload that takes seconds to read, then the client goes: the child is
    killed within a second or two and nothing is stored."""
    url, port, token = server
    boundary, body = _multipart("slow.pdf", text_bomb_pdf(400_000))
    with _connect(port) as sock:
        sock.sendall(
            f"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary.decode()}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 20
        while not _parse_workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _parse_workers(), "the upload never started a parser"
    deadline = time.monotonic() + 5
    while _parse_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _parse_workers()
    time.sleep(0.5)
    assert _documents(url, token) == []


# -- the middleware: header size and WebSocket handshakes ---------------------------------


@pytest.fixture
def client(tmp_path):
    app = plain_app(tmp_path)
    with TestClient(app, base_url="http://127.0.0.1:8765") as test_client:
        yield test_client, app.state.token


def test_the_middleware_refuses_headers_over_the_limit_with_431(client):
    """However the headers came (pipelined, a test client), over max_header_bytes is 431."""
    test_client, _token = client
    r = test_client.get("/healthz", headers={"X-Big": "a" * 40_000})
    assert r.status_code == 431
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "max_header_bytes" in r.json()["error"]["message"]
    assert test_client.get("/healthz", headers={"X-Small": "a" * 1000}).status_code == 200


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"host": "evil.example:8765"}, 403, "forbidden_host"),
        ({"origin": "https://evil.example"}, 403, "forbidden_origin"),
        ({"origin": "null"}, 403, "forbidden_origin"),
        ({}, 401, "unauthorized"),  # /v1/ needs the token
        ({"x-big": "a" * 40_000}, 431, "invalid_request"),
    ],
)
def test_websocket_handshakes_get_the_http_checks(client, headers, status, code):
    """A WebSocket to the companion is refused like an HTTP request, with the envelope."""
    test_client, _token = client
    sent = {"host": "127.0.0.1:8765", **headers}
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        test_client.websocket_connect("/v1/anything", headers=sent),
    ):
        pass
    assert denied.value.status_code == status
    assert denied.value.json()["error"]["code"] == code


def test_an_allowed_websocket_handshake_reaches_the_app(client):
    """With the token and a loopback Host it passes the middleware; no route: closed."""
    test_client, token = client
    with (
        pytest.raises(WebSocketDisconnect),
        test_client.websocket_connect(
            "/v1/anything", headers={"authorization": f"Bearer {token}"}
        ) as ws,
    ):
        ws.receive_text()
