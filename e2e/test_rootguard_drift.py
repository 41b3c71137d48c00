"""RootGuard in the real extension: numbers that drift, ε both ways, a value added later."""

from __future__ import annotations

import pytest

from e2e.harness import Browser, history, type_prompt, wait_for_records
from e2e.test_rootguard import set_mode
from py_core.rootguard import api

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

STORED = {"weight_kg": 82.4, "age": 52}
DRIFT_PROMPT = "weight 83.4 kg, I'm 53. Is that healthy?"


def save(browser: Browser, values: dict[str, float]) -> None:
    options = browser.options()
    for name, value in values.items():
        options.fill(f"input[data-true={name}]", str(value))
    options.click("#rg-save")
    options.wait_for_selector(f"td[data-noisy={next(iter(values))}]:not(:empty)", timeout=20000)
    options.close()


def send(browser: Browser, text: str) -> str:
    browser.recorder.clear()
    page = browser.open_site("chatgpt.com")
    type_prompt(page, "chatgpt.com", text)
    page.keyboard.press("Enter")
    sent = wait_for_records(page, browser.recorder)[0].text
    page.close()
    return sent


def test_drifted_numbers_are_sent_replaced_and_offered_for_storing(browser: Browser) -> None:
    """ "weight 83.4 kg, I'm 53" with 82.4 and 52 stored: both replaced, drawn once, reused.

    The options page then offers "Store 83.4 as my weight": the draw already sent becomes
    the stored one and nothing is spent."""
    save(browser, STORED)
    set_mode(browser, "chatgpt.com", "numbers")
    before = browser.storage()["rootguard"]
    first = send(browser, DRIFT_PROMPT)
    stored = browser.storage()["rootguard"]
    drifts = stored["state"]["drifts"]
    assert set(drifts) == {"weight_kg", "age"}
    weight = f"{drifts['weight_kg']['834']['value']:.1f}"
    age = f"{drifts['age']['53']['value']:.0f}"
    assert first == f"weight {weight} kg, I'm {age}. Is that healthy?"
    # Recomputed from the stored record: the same text, and nothing more to draw.
    again = api.protect_text(DRIFT_PROMPT, stored["profile"], stored["trueValues"], stored["state"])
    assert again["text"] == first and again["state"] == stored["state"]
    events = [e["event"] for e in api.ledger(stored["state"])]
    assert events == ["init", "drift", "drift"]
    assert [e["event"] for e in stored["events"]] == ["initialised", "drift", "drift"]
    assert [r["drift"] for r in history(browser, "chatgpt")[-1]["replacements"]] == [True, True]
    # Sending it again reuses both draws.
    assert send(browser, DRIFT_PROMPT) == first
    assert browser.storage()["rootguard"]["state"] == stored["state"]

    options = browser.options()
    options.wait_for_selector("#rg-drifts li[data-drift=weight_kg]")
    assert "you wrote 83.4 kg (stored: 82.4 kg)" in options.inner_text("#rg-drifts")
    options.click("button[data-store=weight_kg]")
    options.wait_for_selector("#rg-drifts li[data-drift=weight_kg][data-drift-value='82.4']")
    after = browser.storage()["rootguard"]
    assert after["trueValues"]["weight_kg"] == 83.4
    assert api.ledger(after["state"]) == api.ledger(stored["state"])  # nothing spent
    assert after["state"]["roots"]["weight_kg"]["index"] == drifts["weight_kg"]["834"]["index"]
    assert after["state"]["drifts"]["weight_kg"]["824"] == {
        k: before["state"]["roots"]["weight_kg"][k] for k in drifts["weight_kg"]["834"]
    }
    assert after["events"][-1]["event"] == "updated"
    options.close()
    assert send(browser, DRIFT_PROMPT) == first  # the same numbers, now one of them stored


def test_epsilon_is_shown_both_ways(browser: Browser) -> None:
    """Options page: each root's "ε 1 per 10 kg" and its domain ε; both totals; the notice too."""
    described = api.describe(api.DEFAULT_PROFILE)
    options = browser.options()
    options.wait_for_selector("#rg-budget-line:not(:empty)")
    line = options.inner_text("#rg-budget-line")
    assert described["total_label"] in line
    assert f"{described['total_domain_epsilon']:.4g}" in line
    for name in ("weight_kg", "age", "creatinine"):
        root = described["roots"][name]
        assert options.inner_text(f"[data-epsilon={name}]") == root["label"]
        assert options.inner_text(f"[data-domain-epsilon={name}]") == root["domain_label"]
    assert options.inner_text("[data-epsilon=weight_kg]") == "ε 1 per 10 kg"
    options.close()
    save(browser, STORED)
    set_mode(browser, "chatgpt.com", "numbers")
    page = browser.open_site("chatgpt.com")
    type_prompt(page, "chatgpt.com", "weight 82.4 kg")
    page.keyboard.press("Enter")
    wait_for_records(page, browser.recorder)
    page.wait_for_selector("veil-notice", state="attached")
    notice = page.evaluate("() => document.querySelector('veil-notice').shadowRoot.textContent")
    assert described["roots"]["weight_kg"]["label"] in notice
    assert described["roots"]["weight_kg"]["domain_label"] in notice
    page.close()


def test_add_a_value_later_draws_only_it(browser: Browser) -> None:
    """Save weight; later add height: weight's noisy value unchanged, height drawn once."""
    save(browser, {"weight_kg": 82.4})
    first = browser.storage()["rootguard"]
    options = browser.options()
    rows = options.eval_on_selector_all("#rg-table tbody tr", "rs => rs.map(r => r.dataset.value)")
    entered = list(api.DEFAULT_PROFILE["values"])  # what the page showed when it was saved
    assert rows == entered  # chrome.storage sorts keys; the record keeps the entered order
    assert options.is_disabled("input[data-true=weight_kg]")
    assert options.is_enabled("input[data-true=height_cm]")
    noisy_weight = options.inner_text("td[data-noisy=weight_kg]")

    # An error is shown beside its field, and nothing is drawn.
    options.fill("input[data-true=height_cm]", "500")
    options.click("#rg-add")
    slot = "[data-error-for='height_cm:true']"
    options.wait_for_selector(f"{slot}:not([hidden])")
    assert "outside the public domain" in options.inner_text(slot)
    assert options.get_attribute("input[data-true=height_cm]", "aria-invalid") == "true"
    assert browser.storage()["rootguard"] == first

    options.fill("input[data-true=height_cm]", "171")
    options.click("#rg-add")
    options.wait_for_selector("td[data-noisy=height_cm]:not(:empty)", timeout=20000)
    after = browser.storage()["rootguard"]
    assert after["state"]["roots"]["weight_kg"] == first["state"]["roots"]["weight_kg"]
    assert options.inner_text("td[data-noisy=weight_kg]") == noisy_weight
    ledger = api.ledger(after["state"])
    assert [(e["event"], list(e["epsilon"])) for e in ledger] == [
        ("init", ["weight_kg"]),
        ("add", ["height_cm"]),
    ]
    assert [e["event"] for e in after["events"]] == ["initialised", "added"]
    assert after["trueValues"] == {"height_cm": 171, "weight_kg": 82.4}
    rows = options.eval_on_selector_all("#rg-table tbody tr", "rs => rs.map(r => r.dataset.value)")
    assert rows == entered
    assert options.is_disabled("input[data-true=height_cm]")
    assert options.is_enabled("input[data-true=age]")  # still addable
    options.close()


def test_a_bad_domain_is_shown_beside_its_field(browser: Browser) -> None:
    """Before the first save: an inverted domain and a non-number, each beside its field."""
    options = browser.options()
    options.fill("input[data-root=age][data-field=lo]", "90")
    options.fill("input[data-root=age][data-field=hi]", "20")
    options.click("#rg-save")
    options.wait_for_selector("[data-error-for='age:lo']:not([hidden])")
    assert "inverted" in options.inner_text("[data-error-for='age:lo']")
    # A typed number outside its domain is named beside its field.
    options.fill("input[data-true=waist_cm]", "20")
    options.click("#rg-save")
    options.wait_for_selector("[data-error-for='waist_cm:true']:not([hidden])")
    assert "[50, 180]" in options.inner_text("[data-error-for='waist_cm:true']")
    # A problem only the core finds (a unit of another quantity) goes beside its field too.
    options.fill("input[data-root=age][data-field=lo]", "18")
    options.fill("input[data-root=age][data-field=hi]", "100")
    options.fill("input[data-true=waist_cm]", "")
    options.fill("input[data-root=weight_kg][data-field=unit]", "kgs")
    options.click("#rg-save")
    slot = "[data-error-for='weight_kg:unit']"
    options.wait_for_selector(f"{slot}:not([hidden])", timeout=20000)
    assert "'kgs' is not a unit of 'mass'; use one of ['kg', 'lb']" in options.inner_text(slot)
    assert options.is_hidden("[data-error-for='age:lo']")
    assert "rootguard" not in browser.storage()
    options.close()


def test_the_popup_preview_states_rootguards_epsilon_both_ways(browser: Browser) -> None:
    """The popup's preview of a draft with a stored and a drifted value: both ε labels, and
    the drifted value named as a new draw."""
    from e2e.test_preview import popup_for_draft

    save(browser, STORED)
    set_mode(browser, "chatgpt.com", "numbers")
    popup = popup_for_draft(browser, "weight 82.4 kg and I'm 53")
    popup.wait_for_selector("#rootguard-budget:not([hidden])", timeout=30000)
    text = popup.inner_text("#rootguard-budget")
    described = api.describe(api.DEFAULT_PROFILE)["roots"]
    for name in ("weight_kg", "age"):
        assert f"{name}: {described[name]['label']} ({described[name]['domain_label']})" in text
    assert "sent as a new noisy draw: age" in text
    popup.close()
