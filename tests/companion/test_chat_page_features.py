"""The chat page people keep (issue 25.2), in Chromium against a real companion whose
answers are scripted (tests/companion/scripted_model.py): Stop (and the server stops
generating within 1 s), regenerate, copy, Markdown with an XSS attempt that must not run,
conversations titled from their first question with dates and search, the settings
drawer, a deleted collection never asked for, and a guest key's page."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from tests.companion.fakes import KeywordEmbedder, free_port, serve_http
from tests.companion.scripted_model import Script, install, tiny_chat_model

ANKLE = "What should I take for the sprained ankle after the football match on Sunday?"
MARKDOWN = (
    "## Plan\n"
    "Take **ibuprofen 400 mg** with *food*, see `dose.txt`:\n\n"
    "- rest\n- ice\n\n"
    "```\nprint('<b>not bold</b>')\n```\n"
    '<img src=x onerror="window.__xss = 1"><script>window.__xss = 2</script>'
    "[click](javascript:window.__xss=3) and [the leaflet](https://example.org/leaflet)"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("tiny-chat"))


@pytest.fixture
def site(tiny, tmp_path, monkeypatch):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --test installs it)")
    from playwright.sync_api import sync_playwright

    from companion.app import create_app
    from companion.settings import Settings

    torch.set_num_threads(1)
    script = install(monkeypatch, Script())
    port = free_port()
    settings = Settings(home=tmp_path, port=port, model=str(tiny))
    app = create_app(settings, embedder=KeywordEmbedder())
    with serve_http(app, port, timeout=60) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        yield page, url, app, script, tmp_path
        assert not errors, errors
        browser.close()


def _connect(page, url, token):
    page.goto(url + "/")
    page.wait_for_selector("#settings:not([hidden])")  # no token yet: the drawer is open
    page.fill("#token", token)
    page.click("#save-token")
    page.wait_for_selector("#token-state:has-text('Connected')")


def _upload(page, tmp_path, collection, name, text):
    note = tmp_path / name
    note.write_text(text)
    page.fill("#new-collection", collection)
    page.set_input_files("#files", str(note))
    page.click("#upload")
    page.wait_for_selector(f"#doc-list li:has-text('{name}')", timeout=60_000)


def _ask(page, text, n):
    page.fill("#prompt", text)
    page.click("#send")
    page.wait_for_selector(f".msg.assistant:nth-of-type({2 * n}) .receipt", timeout=60_000)


def _shot(page, name):
    """With VEIL_SCREENSHOTS=docs/companion, the page as docs/companion shows it."""
    shots = os.environ.get("VEIL_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / name))


@pytest.mark.slow
def test_markdown_copy_regenerate_conversations_and_the_drawer(site):
    page, url, app, script, tmp_path = site
    _connect(page, url, app.state.token)
    _upload(page, tmp_path, "visits", "visit.txt", "Doctor: ibuprofen 400 mg for the ankle.")
    page.eval_on_selector("#settings", "el => { el.scrollTop = 0; }")
    _shot(page, "settings-drawer.png")
    page.click("#close-settings")
    assert page.is_hidden("#settings")
    assert "collection visits" in page.inner_text("#chat-context")
    script.answers = [MARKDOWN, "A second, different answer."]
    _ask(page, ANKLE, 1)
    answer = ".msg.assistant:nth-of-type(2)"
    # Markdown rendered; the model's HTML shown as text, never run
    assert page.inner_text(f"{answer} .answer h4") == "Plan"
    assert page.inner_text(f"{answer} .answer strong") == "ibuprofen 400 mg"
    assert page.locator(f"{answer} .answer li").count() == 2
    assert "<b>not bold</b>" in page.inner_text(f"{answer} .answer pre")
    assert page.locator(f"{answer} img, {answer} script, {answer} .answer b").count() == 0
    assert "<img src=x" in page.inner_text(f"{answer} .answer")
    assert page.get_attribute(f"{answer} .answer a", "href") == "https://example.org/leaflet"
    assert page.locator(f"{answer} a[href^='javascript']").count() == 0
    assert page.evaluate("window.__xss") is None
    # which collection and passages it used
    used = page.inner_text(f"{answer} .used")
    assert used.startswith("Collection visits: 1 passage used") and "visit.txt" in used
    # copy gives the raw text
    page.click(f"{answer} .copy")
    page.wait_for_selector(f"{answer} .copy:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == MARKDOWN
    _shot(page, "chat-markdown.png")
    # regenerate asks the same question again, in place of the answer: one per question
    page.click(f"{answer} .regenerate")
    page.wait_for_selector(f"{answer} .answer:has-text('A second, different answer.')")
    page.wait_for_selector(f"{answer} .receipt", timeout=60_000)
    assert script.asked[-1] == script.asked[-2] == ANKLE
    assert page.locator(".msg").count() == 2
    assert page.locator(".regenerate:visible").count() == 1  # only under the last answer
    conv_id = page.evaluate("localStorage.getItem('veil-conversation')")
    auth = {"Authorization": f"Bearer {app.state.token}"}
    import httpx

    stored = httpx.get(f"{url}/v1/conversations/{conv_id}", headers=auth).json()["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", ANKLE),
        ("assistant", "A second, different answer."),
    ]
    # edit: a follow-up, then the first question changed -- what followed it is replaced
    script.answers = ["Rest it.", "Ice it for 20 minutes."]
    _ask(page, "And how long should I rest?", 2)
    assert page.locator(".msg").count() == 4
    page.click(".msg.user:nth-of-type(1) .edit")
    page.fill(".msg.user .edit-box", "Should I put ice on the sprained ankle?")
    _shot(page, "chat-edit.png")
    page.click(".msg.user .edit-send")
    page.wait_for_selector(".msg.assistant .answer:has-text('Ice it for 20 minutes.')")
    page.wait_for_selector(".msg.assistant .receipt", timeout=60_000)
    assert page.locator(".msg").count() == 2
    assert page.inner_text(".msg.user .question") == "Should I put ice on the sprained ankle?"
    stored = httpx.get(f"{url}/v1/conversations/{conv_id}", headers=auth).json()["messages"]
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "Should I put ice on the sprained ankle?"),
        ("assistant", "Ice it for 20 minutes."),
    ]
    page.reload()  # the page shows what the companion kept
    page.wait_for_selector(".msg.assistant .answer:has-text('Ice it for 20 minutes.')")
    assert page.locator(".msg").count() == 2
    # conversations: titled from the first question, dated, searchable
    page.click("#new-conversation")
    script.answers = ["Gout answer: allopurinol lowers urate."]
    _ask(page, "Is allopurinol for gout?", 1)
    # The list is refreshed after the answer is stored: wait for the second item (a clean
    # clone's CI run read the count before the refresh had landed).
    page.wait_for_selector("#conversation-list li:nth-child(2)", timeout=30_000)
    items = page.locator("#conversation-list li")
    assert items.count() == 2
    titles = page.eval_on_selector_all(
        "#conversation-list .conversation-title", "els => els.map(e => e.textContent)"
    )
    from companion.conversations.store import title_from

    assert titles == ["Is allopurinol for gout?", title_from(ANKLE)]  # the store's own rule
    assert titles[1] == "What should I take for the sprained ankle after the…"
    dates = page.eval_on_selector_all("#conversation-list time", "els => els.map(e => e.dateTime)")
    assert all(d.startswith(time.strftime("%Y-%m-%d", time.gmtime())[:4]) for d in dates)
    assert page.inner_text("#conversation-list li time").strip()
    page.fill("#conversation-search", "ankle")
    page.wait_for_selector("#conversation-state:has-text('1 conversation match')")
    assert page.locator("#conversation-list li").count() == 1
    assert "sprained" in page.inner_text("#conversation-list li")
    # the messages' words too, not only the titles: "urate" is said in an answer only
    page.fill("#conversation-search", "urate")
    page.wait_for_selector("#conversation-list .conversation-snippet mark:has-text('urate')")
    assert page.locator("#conversation-list li").count() == 1
    assert page.inner_text("#conversation-list .conversation-snippet").startswith("Answer: ")
    _shot(page, "conversations.png")
    page.fill("#conversation-search", "nothing like this")
    page.wait_for_selector("#conversation-state:has-text('No conversation matches')")
    page.fill("#conversation-search", "")
    page.wait_for_selector("#conversation-list li:nth-child(2)")
    assert page.locator("#conversation-list li").count() == 2
    assert page.inner_text("#conversation-state") == ""


@pytest.mark.slow
def test_stop_ends_the_answer_and_the_server_generation_within_1_s(site):
    page, url, app, script, _ = site
    _connect(page, url, app.state.token)
    page.click("#close-settings")
    script.answers = ["word " * 400]
    script.delay = 0.05
    page.fill("#prompt", "Tell me everything.")
    page.click("#send")
    page.wait_for_selector("#stop:visible")
    deadline = time.monotonic() + 30  # (wait_for_function would need 'unsafe-eval')
    while len(page.inner_text(".msg.assistant .answer")) <= 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    clicked = time.monotonic()
    page.click("#stop")
    page.wait_for_selector(".msg.assistant.stopped .stopped-note", timeout=5_000)
    assert page.is_visible("#send") and page.is_hidden("#stop")
    deadline = time.monotonic() + 5
    while not script.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert script.cancelled, "the server kept generating after Stop"
    latency = script.cancelled[0] - clicked
    print(f"Stop in the page -> generation cancelled on the server: {latency * 1000:.0f} ms")
    assert latency < 1.0
    assert script.pieces < 400
    # the model is free again at once
    script.answers, script.delay = ["Short."], 0.0
    _ask(page, "Anything else?", 2)
    assert page.inner_text(".msg.assistant:nth-of-type(4) .answer") == "Short."


@pytest.mark.slow
def test_a_deleted_collection_is_never_asked_for_after_a_reload(site):
    page, url, app, _, tmp_path = site
    _connect(page, url, app.state.token)
    _upload(page, tmp_path, "old", "old.txt", "Old note about gout.")
    page.click("#close-settings")
    _ask(page, "gout?", 1)
    import httpx

    auth = {"Authorization": f"Bearer {app.state.token}"}
    assert httpx.delete(f"{url}/v1/collections/old", headers=auth).is_success
    page.reload()
    page.wait_for_selector(".msg.assistant .receipt")
    options = page.eval_on_selector_all("#collection option", "os => os.map(o => o.value)")
    assert "old" not in options
    requests: list[dict] = []
    page.on(
        "request",
        lambda r: requests.append(r.post_data_json) if r.url.endswith("/completions") else None,
    )
    _ask(page, "and now?", 2)
    assert requests and requests[-1].get("collection") != "old"


def test_many_files_go_in_uploads_that_fit_the_limits_and_a_too_large_one_is_named(site):
    page, url, app, _, tmp_path = site
    app.state.settings.max_upload_files = 2
    app.state.settings.max_upload_bytes = 64_000
    _connect(page, url, app.state.token)
    paths = []
    for i in range(5):
        note = tmp_path / f"note-{i}.txt"
        note.write_text(f"Note {i}: the clinic sees gout patient {i} on day {i}.")
        paths.append(str(note))
    posts: list[str] = []
    page.on(
        "request",
        lambda r: posts.append(r.url) if r.method == "POST" and "/v1/documents" in r.url else None,
    )
    page.fill("#new-collection", "many")
    page.set_input_files("#files", paths)
    page.click("#upload")
    page.wait_for_selector("#upload-state:has-text('5 files added')", timeout=60_000)
    assert len(posts) == 3  # 2 + 2 + 1: each request within max_upload_files
    for i in range(5):
        page.wait_for_selector(f"#doc-list li:has-text('note-{i}.txt')")
    # a file over the limit alone: named, with the limit, and nothing is sent
    big = tmp_path / "big.txt"
    big.write_text("gout " * 20_000)
    page.set_input_files("#files", [str(big), paths[0]])
    page.click("#upload")
    page.wait_for_selector("#upload-state:has-text('big.txt')")
    said = page.inner_text("#upload-state")
    assert "big.txt (100 kB)" in said and "up to 64 kB per upload" in said, said
    assert "Not uploaded" in page.inner_text("#upload-state") and len(posts) == 3


@pytest.mark.slow
def test_a_guest_key_gets_a_chat_only_page(site):
    page, url, app, script, _ = site
    import httpx

    auth = {"Authorization": f"Bearer {app.state.token}"}
    files = [("files", ("shared.txt", b"Shared: the clinic opens at nine.", "text/plain"))]
    assert httpx.post(
        f"{url}/v1/documents", headers=auth, files=files, data={"collection": "shared"}
    ).is_success
    made = httpx.post(
        f"{url}/v1/keys",
        headers=auth,
        json={"collection": "shared", "defense": "bounded", "budget": 50, "label": "Sam"},
    ).json()
    script.answers = ["The clinic opens at **nine**.", "Second."]
    _connect(page, url, made["key"])
    page.wait_for_selector("#token-state:has-text('guest key')")
    page.click("#close-settings")
    # only what a guest may use: no conversations, documents, defense or keys
    assert page.is_visible("#guest-box")
    for owner_only in ("#conversations-box", "#keys-box", "#doc-list", "#defense"):
        assert not page.is_visible(owner_only), owner_only
    page.fill("#prompt", "When does the clinic open?")
    page.click("#send")
    page.wait_for_selector(".msg.assistant .receipt", timeout=60_000)
    assert page.inner_text(".msg.assistant .answer strong") == "nine"
    state = page.inner_text("#guest-state")
    assert "collection shared" in state and "of 50 left" in state, state
    remaining = float(page.get_attribute("#guest-state", "data-remaining"))
    assert 0 < remaining < 50
    _shot(page, "guest.png")
    # the follow-up carries the conversation (guests have no stored ones)
    requests: list[dict] = []
    page.on(
        "request",
        lambda r: requests.append(r.post_data_json) if r.url.endswith("/completions") else None,
    )
    page.fill("#prompt", "And on Sunday?")
    page.click("#send")
    page.wait_for_selector(".msg.assistant:nth-of-type(4) .receipt", timeout=60_000)
    sent = requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert "collection" not in sent and "defense" not in sent and "conversation_id" not in sent
    assert float(page.get_attribute("#guest-state", "data-remaining")) < remaining
    # regenerate and edit in a guest's page: the conversation the page keeps is replaced
    # from that question on, and what is sent carries only what comes before it
    page.click(".msg.assistant:nth-of-type(4) .regenerate")
    page.wait_for_selector(".msg.assistant:nth-of-type(4) .receipt", timeout=60_000)
    assert page.locator(".msg").count() == 4
    assert requests[-1]["fresh"] is True  # a new answer, not the one released before
    assert [m["content"] for m in requests[-1]["messages"]] == [
        "When does the clinic open?",
        "The clinic opens at **nine**.",
        "And on Sunday?",
    ]
    page.click(".msg.user:nth-of-type(1) .edit")
    page.fill(".msg.user .edit-box", "When does the clinic close?")
    page.click(".msg.user .edit-send")
    page.wait_for_selector(".msg.assistant .receipt", timeout=60_000)
    assert page.locator(".msg").count() == 2
    assert [m["content"] for m in requests[-1]["messages"]] == ["When does the clinic close?"]
    # the same question again (a new conversation): the answer released before, served
    # again at no cost -- the page says so and the key's budget does not move
    left = float(page.get_attribute("#guest-state", "data-remaining"))
    first = page.inner_text(".msg.assistant .answer")
    page.click("#guest-new")
    page.fill("#prompt", "When does the clinic close?")
    page.click("#send")
    page.wait_for_selector(".msg.assistant .receipt-served-again", timeout=60_000)
    assert "Nothing was charged" in page.inner_text(".msg.assistant .receipt-served-again")
    assert page.inner_text(".msg.assistant:last-of-type .answer") == first
    assert float(page.get_attribute("#guest-state", "data-remaining")) == pytest.approx(left)
    # revoked: the page says so in one sentence
    assert httpx.delete(f"{url}/v1/keys/{made['guest_key']['id']}", headers=auth).is_success
    page.fill("#prompt", "Still there?")
    page.click("#send")
    page.wait_for_selector(".msg.error")
    assert "revoked by the companion's owner" in page.inner_text(".msg.error")
