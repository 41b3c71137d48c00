"""Fixtures for the end-to-end tests: build, recorder, one shared browser."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Playwright, sync_playwright

from e2e.harness import EXTENSION, FIXTURES, Browser, build_all
from e2e.recorder import Recorder

# As in tests/conftest.py: the served default is SmolLM2 whatever model wheels are installed.
os.environ.setdefault("VEIL_DEFAULT_MODEL", "smollm2-135m-instruct")


@pytest.fixture(scope="session")
def built() -> Path:
    """The extension and fixture pages, built if missing or stale."""
    build_all()
    return EXTENSION


@pytest.fixture(scope="session")
def recorder(built: Path) -> Iterator[Recorder]:
    rec = Recorder(FIXTURES).start()
    yield rec
    rec.stop()


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def shared_browser(
    playwright: Playwright,
    built: Path,
    recorder: Recorder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Browser]:
    browser = Browser(playwright, built, tmp_path_factory.mktemp("profile"), recorder)
    browser.wait_core()
    yield browser
    browser.close()


@pytest.fixture
def browser(shared_browser: Browser, recorder: Recorder) -> Iterator[Browser]:
    """The shared browser with default settings, empty history and a fresh recorder."""
    shared_browser.reset_storage()
    recorder.clear()
    yield shared_browser
    for page in shared_browser.pages():
        if not page.is_closed():
            # Do not wait for the tab to go: waiting on a tab that had a routed
            # navigation can hang Playwright.
            page.close(run_before_unload=True)
