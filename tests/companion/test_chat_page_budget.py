"""The documents' lifetime budgets in the chat page (issue 30.5), in Chromium against a real
companion whose answers are scripted (the `site` fixture of test_chat_page_features): each
document's meter, reset with a reason and the log, asking before an answer spends a budget
(declined: nothing charged; accepted: charged as estimated), and "Preview as a guest"."""

from __future__ import annotations

import httpx
import pytest

from tests.companion.test_chat_page_features import (  # noqa: F401 - the fixtures
    _connect,
    _shot,
    _upload,
    site,
    tiny,
)


def _budget(url, auth):
    rows = httpx.get(f"{url}/v1/budget", headers=auth).json()["documents"]
    return {d["document"]: d for d in rows}


def _log(url, auth):
    return httpx.get(f"{url}/v1/budget/log", headers=auth).json()["entries"]


def _meter(page, name):
    return page.locator(f"#doc-list li:has-text('{name}') .budget-meter")


def _requests(page, suffix):
    seen: list = []
    page.on("request", lambda r: seen.append(r) if r.url.endswith(suffix) else None)
    return seen


@pytest.mark.slow
def test_meters_ask_before_spending_reset_with_a_reason_and_the_log(site):  # noqa: F811
    page, url, app, script, tmp_path = site
    auth = {"Authorization": f"Bearer {app.state.token}"}
    _connect(page, url, app.state.token)
    _upload(page, tmp_path, "med", "gout.txt", "gout is eased by colchicine and rest")
    _upload(page, tmp_path, "med", "cats.txt", "cats sleep sixteen hours a day")
    # a meter per document, in words and a bar
    page.wait_for_selector("#doc-list li:has-text('gout.txt') .budget-meter")
    assert "Budget untouched" in _meter(page, "gout.txt").inner_text()
    assert (
        page.get_attribute("#doc-list li:has-text('gout.txt') [role=meter]", "aria-valuenow")
        == "0.0"
    )
    page.click("#close-settings")
    estimates = _requests(page, "/v1/budget/estimate")
    # the owner's plain default charges nothing: no question asked, no estimate
    script.answers = ["Plainly: colchicine."]
    page.fill("#prompt", "gout?")
    page.click("#send")
    page.wait_for_selector(".msg.assistant:nth-of-type(2) .receipt", timeout=60_000)
    assert not estimates and page.locator("#budget-confirm-dialog[open]").count() == 0
    assert all(d["spent_rdp"] == 0 for d in _budget(url, auth).values())
    # a formal defense: the page shows the cost first
    page.click("#open-settings")
    page.select_option("#defense", "bounded")
    page.fill("#max-tokens", "8")
    page.click("#close-settings")
    log_before = _log(url, auth)
    page.fill("#prompt", "and gout?")
    page.click("#send")
    dialog = page.wait_for_selector("#budget-confirm-dialog[open]")
    rows = page.locator("#budget-confirm-dialog .budget-estimate tr[data-doc-id]")
    assert rows.count() == 1 and "gout.txt" in rows.inner_text()
    assert "Nothing has been charged yet" in dialog.inner_text()
    _shot(page, "budget-confirm.png")
    # declined: nothing sent, nothing charged, the question back in the box
    completions = _requests(page, "/v1/chat/completions")
    page.click("#budget-confirm-dialog .budget-cancel")
    page.wait_for_selector("#chat-context:has-text('nothing was charged')")
    assert not completions
    assert all(d["spent_rdp"] == 0 for d in _budget(url, auth).values())
    assert _log(url, auth) == log_before
    assert page.input_value("#prompt") == "and gout?"
    assert page.locator(".msg.assistant").count() == 1  # the plain answer only
    # declined as the first question of a new conversation: no empty conversation is kept
    kept = httpx.get(f"{url}/v1/conversations", headers=auth).json()["data"]
    page.click("#new-conversation")
    page.fill("#prompt", "gout again?")
    page.click("#send")
    page.wait_for_selector("#budget-confirm-dialog[open]")
    page.click("#budget-confirm-dialog .budget-cancel")
    page.wait_for_selector("#chat-context:has-text('nothing was charged')")
    page.wait_for_function(
        "n => document.querySelectorAll('#conversation-list li').length === n", arg=len(kept)
    )
    assert httpx.get(f"{url}/v1/conversations", headers=auth).json()["data"] == kept
    assert page.input_value("#prompt") == "gout again?" and not completions
    page.click(f"#conversation-list li:has-text('{kept[0]['title']}') .conversation-open")
    page.wait_for_selector(".msg.assistant .answer:has-text('Plainly: colchicine.')")
    # Regenerate asks too (estimated with replace_from); declined, the page is as stored
    with page.expect_request(lambda r: r.url.endswith("/v1/budget/estimate")) as asked:
        page.click(".msg.assistant .regenerate:visible")
    assert asked.value.post_data_json["replace_from"] == 1
    page.wait_for_selector("#budget-confirm-dialog[open]")
    page.click("#budget-confirm-dialog .budget-cancel")
    page.wait_for_selector("#chat-context:has-text('nothing was charged')")
    assert not completions
    texts = page.eval_on_selector_all("#messages .msg", "els => els.map(e => e.className)")
    assert texts == ["msg user", "msg assistant md"], texts
    assert page.inner_text(".msg.assistant .answer") == "Plainly: colchicine."
    assert all(d["spent_rdp"] == 0 for d in _budget(url, auth).values())
    page.fill("#prompt", "and gout?")
    # accepted, but the budgets changed while the dialog was open: refused, nothing charged
    page.click("#send")
    page.wait_for_selector("#budget-confirm-dialog[open]")
    other = {"collection": "med", "defense": "bounded", "defense_params": {"epsilon": 1}}
    other |= {"messages": [{"role": "user", "content": "gout?"}], "max_tokens": 8}
    charging = httpx.post(f"{url}/v1/chat/completions", headers=auth, json=other, timeout=60)
    assert charging.is_success, charging.text
    meanwhile = _budget(url, auth)
    assert meanwhile["gout.txt"]["answers"] == 1
    page.click("#budget-confirm-dialog .budget-spend")
    refused = page.wait_for_selector(".msg.error:has-text('budgets changed since the estimate')")
    assert "nothing was charged" in refused.inner_text()
    assert _budget(url, auth) == meanwhile
    # accepted: charged exactly what the dialog said
    script.answers = ["Under bounded: colchicine."]
    page.fill("#prompt", "and gout?")
    with page.expect_response(lambda r: r.url.endswith("/v1/budget/estimate")) as shown:
        page.click("#send")
    estimate = shown.value.json()
    before = estimate["documents"][0]["spent_rdp_before"]  # spent after - charge: to rounding
    assert before == pytest.approx(meanwhile["gout.txt"]["spent_rdp"], rel=1e-12)
    page.click("#budget-confirm-dialog .budget-spend")
    page.wait_for_selector(".msg.assistant:nth-of-type(6) .receipt", timeout=60_000)
    assert completions[-1].post_data_json["budget_confirm"] == estimate["confirm"]
    charged = page.wait_for_selector(".msg.assistant:nth-of-type(6) .budget-charged")
    assert "as-estimated" in (charged.get_attribute("class") or "")
    assert charged.inner_text().startswith("Charged as estimated: 1 document")
    after = _budget(url, auth)
    (doc,) = estimate["documents"]
    assert after["gout.txt"]["spent_rdp"] == doc["spent_rdp"] > 0
    assert after["gout.txt"]["remaining_rdp"] == doc["remaining_rdp"]
    assert after["cats.txt"]["spent_rdp"] == 0
    assert [e["kind"] for e in _log(url, auth)][:1] == ["charge"]
    # the meter follows the answer: bounded's ε 1 then its default ε 8 spend gout.txt
    page.click("#open-settings")
    page.wait_for_selector("#doc-list li:has-text('gout.txt') .budget-meter.spent")
    words = _meter(page, "gout.txt").inner_text()
    assert words.startswith("Budget spent (ε 8.") and "2 answers;" in words, words
    assert "Budget untouched" in _meter(page, "cats.txt").inner_text()
    page.locator("#doc-list").scroll_into_view_if_needed()
    _shot(page, "budget-meters.png")
    # reset: a reason is required, and it is logged
    page.click("#doc-list li:has-text('gout.txt') .budget-reset")
    page.wait_for_selector("#budget-reset-dialog[open]")
    page.click("#budget-reset-dialog .budget-reset-go")
    page.wait_for_selector("#budget-reset-dialog .budget-problem:has-text('Give a reason')")
    assert _budget(url, auth)["gout.txt"]["spent_rdp"] == doc["spent_rdp"]
    page.fill("#budget-reason", "new term of the study")
    page.click("#budget-reset-dialog .budget-reset-go")
    page.wait_for_selector("#budget-state:has-text('budget reset')")
    page.wait_for_selector("#doc-list li:has-text('gout.txt') .budget-meter:not(.spent)")
    assert "Budget untouched" in _meter(page, "gout.txt").inner_text()
    assert _budget(url, auth)["gout.txt"]["spent_rdp"] == 0
    newest = _log(url, auth)[0]
    assert newest["kind"] == "reset" and newest["detail"]["reason"] == "new term of the study"
    # the log, from the page
    page.click("#budget-log-open")
    page.wait_for_selector("#budget-log-dialog .budget-log-reset")
    log = page.inner_text("#budget-log-dialog .budget-log")
    assert 'reset: "new term of the study"' in log and "charged" in log and "bounded" in log
    _shot(page, "budget-log.png")


@pytest.mark.slow
def test_preview_as_a_guest_shows_the_keys_view_and_charges_nothing(site):  # noqa: F811
    page, url, app, script, _ = site
    auth = {"Authorization": f"Bearer {app.state.token}"}
    files = [("files", ("shared.txt", b"gout clinic: it opens at nine", "text/plain"))]
    assert httpx.post(
        f"{url}/v1/documents", headers=auth, files=files, data={"collection": "shared"}
    ).is_success
    made = httpx.post(
        f"{url}/v1/keys",
        headers=auth,
        json={"collection": "shared", "defense": "bounded", "budget": 50, "label": "Sam"},
    ).json()
    key_id = made["guest_key"]["id"]
    _connect(page, url, app.state.token)
    page.click("#close-settings")
    page.wait_for_selector(f"#preview-key option[value='{key_id}']", state="attached")
    assert "Sam" in page.inner_text("#preview-key")
    budget_before = httpx.get(f"{url}/v1/budget", headers=auth).json()
    sent = _requests(page, "/v1/chat/completions")
    script.answers = ["It opens at nine."]
    page.fill("#prompt", "When does the gout clinic open?")
    page.click("#preview-send")
    answer = ".msg.assistant.preview"
    page.wait_for_selector(f"{answer} .receipt", timeout=60_000)
    banner = page.inner_text(f"{answer} .preview-banner")
    assert banner == f"Preview — what Sam (key #{key_id}) would receive; nothing was charged."
    assert "Nothing was charged" in page.inner_text(f"{answer} .preview-note")
    assert page.inner_text(f"{answer} .answer") == "It opens at nine."
    assert "bounded" in page.inner_text(f"{answer} .receipt").lower()
    assert page.locator(f"{answer} .citations").count() == 0  # a guest sees no passage
    assert "a guest key's answers do not show which passages" in page.inner_text(f"{answer} .used")
    (request,) = sent
    assert request.headers.get("x-veil-preview-guest") == str(key_id)
    body = request.post_data_json
    assert "conversation_id" not in body and "defense" not in body and "collection" not in body
    _shot(page, "guest-preview.png")
    # nothing charged: neither the key nor a document; nothing kept as a conversation
    keys = httpx.get(f"{url}/v1/keys", headers=auth).json()["data"]
    key = next(k for k in keys if k["id"] == key_id)
    assert key["spent"] == 0
    assert httpx.get(f"{url}/v1/budget", headers=auth).json() == budget_before
    assert httpx.get(f"{url}/v1/conversations", headers=auth).json()["data"] == []
    assert page.input_value("#prompt") == "When does the gout clinic open?"  # kept to send
    # a revoked key leaves the choice
    assert httpx.delete(f"{url}/v1/keys/{key_id}", headers=auth).is_success
    page.click("#open-settings")
    page.click("#save-token")  # keys.js lists the keys again
    page.wait_for_selector("#preview-hint:has-text('create a guest key')")
    assert page.locator("#preview-key option").count() == 0


@pytest.mark.slow
def test_the_owner_builds_the_guest_digest_after_seeing_its_cost(site):  # noqa: F811
    page, url, app, _script, tmp_path = site
    auth = {"Authorization": f"Bearer {app.state.token}"}
    _connect(page, url, app.state.token)
    paths = []
    for i in range(64):  # a sentence all share: released but for a chance under 1e-9
        note = tmp_path / f"visit-{i}.txt"
        note.write_text(f"For gout the clinic gives colchicine 500 mg. Visit {i} went well.")
        paths.append(str(note))
    page.fill("#new-collection", "clinic")
    page.set_input_files("#files", paths)
    page.click("#upload")
    page.wait_for_selector("#doc-list li:has-text('visit-63.txt') .budget-meter", timeout=120_000)
    page.click("#digest-open")
    cost = page.wait_for_selector("#digest-dialog[open] .digest-cost")
    assert "charges each of the 64 documents" in cost.inner_text()
    assert all(d["answers"] == 0 for d in _budget(url, auth).values())  # asking charged nothing
    page.click("#digest-dialog .digest-build")
    page.wait_for_selector("#budget-state:has-text('Digest built')")
    assert all(d["answers"] == 1 for d in _budget(url, auth).values())
    assert "once" in page.inner_text("#budget-state")
    page.click("#digest-open")
    listed = page.wait_for_selector("#digest-dialog[open] .digest-statements")
    assert "For gout the clinic gives colchicine [number] mg." in listed.inner_text()
    _shot(page, "digest-dialog.png")
    page.click("#digest-dialog .digest-forget")
    assert httpx.get(f"{url}/v1/collections/clinic/digest", headers=auth).status_code == 404
