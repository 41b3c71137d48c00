"""Real chat components from npm, under a built-in host and as a site the person added (issue 27).

deep-chat (its input in the component's shadow DOM; fetch and WebSocket),
@assistant-ui/react (ComposerPrimitive in a Thread on a local runtime) and
@chatscope/chat-ui-kit-react (MessageInput), bundled from node_modules into
pages of their own (e2e/fixtures/src/redesign/). Each is driven by Enter, by the
component's own send button, and by a real paste then the button: the send must
arrive protected (Veil's header, the prompt's shape perturbed) and no run of the
original may reach the server. Each result is appended to
.e2e-artifacts/components.jsonl (component, host, path, delivered) for the
issue's table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.harness import ROOT, Browser, history
from e2e.test_failclosed import (
    PROMPT,
    add_site,
    assert_original_never_arrived,
    draft,
    grant_clipboard,  # noqa: F401 (a fixture)
    send,
    sends,
    sent_prompt,
    wait_until,
)
from e2e.test_protect import assert_perturbed_shape, squash

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

COMPONENTS = {
    "deep-chat (fetch)": "deepchat?via=fetch",
    "deep-chat (WebSocket)": "deepchat?via=websocket",
    "@assistant-ui/react": "assistantui",
    "@chatscope/chat-ui-kit-react": "chatscope",
}
HOSTS = {"built-in (claude.ai)": "claude.ai", "added site (huggingface.co)": "huggingface.co"}
PATHS = ("enter", "button", "paste-click")
ADDED = "https://huggingface.co"
RESULTS = ROOT / ".e2e-artifacts" / "components.jsonl"


def _record(row: dict[str, object]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with Path(RESULTS).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


@pytest.mark.usefixtures("grant_clipboard")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("where", list(HOSTS))
@pytest.mark.parametrize("component", list(COMPONENTS))
def test_a_real_component_sends_only_protected_text(
    browser: Browser, component: str, where: str, path: str
) -> None:
    host = HOSTS[where]
    site_id = "claude"
    if host == "huggingface.co":
        reply = add_site(browser, ADDED)
        assert reply["ok"], reply
        site_id = f"custom:{ADDED}"
    row: dict[str, object] = {"component": component, "host": where, "path": path}
    try:
        page = browser.open_redesign(host, COMPONENTS[component])
        draft(page, path if path == "paste-click" else "type")
        send(page, "enter" if path == "enter" else "click")
        wait_until(page, lambda: sends(browser.recorder), "nothing was sent")
        page.wait_for_timeout(800)  # a second send would be here by now
        arrivals = sends(browser.recorder)
        row["delivered"] = any(squash(PROMPT) in squash(a.text()) for a in arrivals)
        assert_original_never_arrived(browser.recorder)
        assert len(arrivals) == 1, arrivals
        assert_perturbed_shape(sent_prompt(arrivals[0]), PROMPT)
        assert page.evaluate("() => window.__attempts") == 1
        assert [e["status"] for e in history(browser, site_id)] == ["protected"]
        row["outcome"] = "protected send"
    except BaseException as exc:
        row.setdefault(
            "delivered", any(squash(PROMPT) in squash(a.text()) for a in sends(browser.recorder))
        )
        row["outcome"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
        raise
    finally:
        _record(row)
        if host == "huggingface.co":
            browser.evaluate(
                """(id) => chrome.runtime.sendMessage({type: 'remove-site', target: 'background',
                                                      data: {siteId: id}})""",
                site_id,
            )
