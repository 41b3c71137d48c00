"""Issue 24, point 6, against ``veil serve`` itself: the CLI's own process (``python -m
companion serve``, a tiny chat model), not the app in a test's thread.

Half-open connections are closed within ``header_timeout_s`` (a 408 where part of a
request came), a 100 KB header gets 431, and the server still answers afterwards.
(tests/companion/test_hostile_http.py checks the same limits, and the rest of point 6,
on the app served in a thread with ``veil serve``'s uvicorn settings.)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.companion.fakes import free_port, tiny_chat_model

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 1.5  # VEIL_HEADER_TIMEOUT_S for this server
HALF_OPEN = 60  # connections that send half a request head
SILENT = 20  # connections that send nothing


@pytest.fixture(scope="module")
def veil_serve(tmp_path_factory):
    """``veil serve --model TINY`` in a process of its own; its port."""
    tmp = tmp_path_factory.mktemp("serve")
    tiny = tiny_chat_model(tmp / "tiny")
    port = free_port()
    env = {
        **os.environ,
        "VEIL_HOME": str(tmp / "home"),
        "VEIL_HEADER_TIMEOUT_S": str(TIMEOUT),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("VEIL_TOKEN_PATH", None)
    log = (tmp / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "companion", "serve", "--port", str(port), "--model", str(tiny)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("veil serve did not come up:\n" + (tmp / "serve.log").read_text())
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _still_open(sock: socket.socket) -> tuple[bool, bytes]:
    """Whether the server still holds ``sock`` open, and what it sent before closing it."""
    sock.setblocking(False)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except BlockingIOError:
        return True, data
    except OSError:
        pass
    return False, data


@pytest.mark.slow
def test_half_open_connections_are_closed_by_veil_serve(veil_serve):
    """60 connections with half a head and 20 with nothing: none held past the timeout;
    the half heads get 408; /healthz answers meanwhile and after."""
    port = veil_serve
    half = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(HALF_OPEN)]
    for sock in half:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(SILENT)]
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    time.sleep(TIMEOUT + 3.0)
    answers = [_still_open(sock) for sock in half + silent]
    for sock in half + silent:
        sock.close()
    held = sum(is_open for is_open, _ in answers)
    assert held == 0, f"{held} of {len(answers)} connections still open after {TIMEOUT + 3} s"
    assert all(data.startswith(b"HTTP/1.1 408 ") for _, data in answers[:HALF_OPEN])
    assert all(data == b"" for _, data in answers[HALF_OPEN:])
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200


@pytest.mark.slow
def test_a_100_kb_header_gets_431_from_veil_serve(veil_serve):
    port = veil_serve
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: ".encode()
            + b"a" * 100_000
            + b"\r\n\r\n"
        )
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    assert data.startswith(b"HTTP/1.1 431 "), data[:200]
    assert b"max_header_bytes" in data
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
