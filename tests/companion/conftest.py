"""Fixtures the companion's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.companion.fakes import tiny_chat_model


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random chat model (a llama with a chat template), made once per session;
    a module that needs its own (another name or architecture) defines its own."""
    return Path(tiny_chat_model(tmp_path_factory.mktemp("tiny-chat")))
