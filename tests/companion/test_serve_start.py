"""``veil serve``'s first start (issue 25.3): a busy port is said before anything loads,
and Ctrl-C while the model is converted the first time exits within 2 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.companion.fakes import free_port

ROOT = Path(__file__).resolve().parents[2]


def _serve(home: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "VEIL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("VEIL_TOKEN_PATH", None)
    return subprocess.Popen(
        [sys.executable, "-m", "companion", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_busy_port_is_said_before_the_model_loads(tmp_path):
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        started = time.monotonic()
        proc = _serve(tmp_path, port)
        out, _ = proc.communicate(timeout=120)
        took = time.monotonic() - started
    assert proc.returncode == 1, out
    assert f"port {port} on 127.0.0.1 is already in use" in out
    assert f"--port {port + 1}" in out
    assert "API token" not in out and "loading the model" not in out
    assert not (tmp_path / "token").exists()  # nothing was set up, nothing loaded
    print(f"busy port said after {took:.1f} s (interpreter start and imports)")


@pytest.mark.slow
def test_ctrl_c_during_the_first_conversion_exits_within_2_s(tmp_path):
    """A fresh home: the bundled GGUF is dequantized (the first start's long step); Ctrl-C
    then ends the process within 2 s and leaves no finished-looking copy behind."""
    proc = _serve(tmp_path, free_port())
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "dequantizing" in line:
            break
    text = "".join(lines)
    if "dequantizing" not in text:
        proc.kill()
        pytest.fail("the first start never said it converts the model:\n" + text)
    assert "GB copy to" in text  # what it writes and where (companion.models)
    time.sleep(1.0)  # well inside the conversion
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("Ctrl-C during the conversion did not stop the server within 10 s")
    took = time.monotonic() - sent
    print(f"Ctrl-C during the conversion: exited after {took:.2f} s")
    assert took < 2.0, took
    assert proc.returncode != 0
    assert "stopped while starting" in rest
    models = tmp_path / "models"
    finished = (
        [p for p in models.glob("*") if not p.name.endswith(".partial")] if models.exists() else []
    )
    assert not any((p / "model.safetensors").exists() for p in finished)
