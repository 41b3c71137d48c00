"""Korean and French prompts leave as perturbed text of their own script, never as typed."""

from __future__ import annotations

import pytest

from e2e.harness import (
    SITE_ID,
    Browser,
    send_prompt,
    wait_receipts,
    wait_saved,
)
from py_core import alphabets, krr
from py_core.language import HEADERS

# A hung browser call fails its test instead of stalling the run.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

KOREAN = "환자 김민준 씨는 화요일부터 가슴 통증이 있다고 말했습니다 연락처는 서울 강남구입니다"
FRENCH = "Le patient Jérôme Lefèvre se plaint de fièvre depuis mardi et doit être revu à l'hôpital"


def squash(text: str) -> str:
    return " ".join(text.split())


def body_after(sent: str, header: str) -> str:
    squashed, head = squash(sent), squash(header)
    assert squashed.startswith(head), sent[:160]
    return squashed[len(head) :].strip()


send = send_prompt


@pytest.mark.parametrize("host", ["chatgpt.com", "chat.deepseek.com"])
def test_korean_prompt_arrives_as_other_hangul_syllables(browser: Browser, host: str) -> None:
    """Every Hangul syllable leaves as a valid Hangul syllable; the header is Korean."""
    sent = send(browser, host, KOREAN)
    body = body_after(sent, HEADERS["ko"])
    assert len(body) == len(KOREAN) and body != KOREAN
    assert KOREAN not in squash(sent)
    for got, typed in zip(body, KOREAN, strict=True):
        if typed == " ":
            assert got == " "
        else:
            assert 0xAC00 <= ord(got) <= 0xD7A3, f"{got!r} is not a Hangul syllable"
    entries = wait_receipts(browser, SITE_ID[host])
    receipt = entries[-1]["receipt"]
    assert receipt["alphabets"] == "fold" and receipt["header_language"] == "ko"
    assert {s["script"] for s in receipt["scripts"]} == {"hangul"}
    assert 0 < receipt["epsilon_total_composed"] <= receipt["epsilon_total_basic"]


def test_french_prompt_leaves_without_its_accents_by_default(browser: Browser) -> None:
    """The default (accents into ASCII): é leaves as e, then k-RR over ASCII; French header."""
    sent = send(browser, "chatgpt.com", FRENCH)
    body = body_after(sent, HEADERS["fr"])
    assert len(body) == len(FRENCH) and body != FRENCH
    assert FRENCH not in squash(sent)
    for got, typed in zip(body, FRENCH, strict=True):
        assert (got == " ") == (typed == " ")
        assert typed == " " or got in krr.ALPHABET, repr(got)
    receipt = wait_receipts(browser, "chatgpt")[-1]["receipt"]
    assert receipt["alphabets"] == "fold" and receipt["latin_marks"] is False
    assert receipt["accents_folded"] == sum(not c.isascii() for c in FRENCH)
    assert receipt["header_language"] == "fr"


def test_french_prompt_arrives_as_accented_latin_words(browser: Browser) -> None:
    """With "each script with its accents" chosen: Latin letters with accents, never as typed."""
    popup = browser.popup("chatgpt.com")
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.check("input[name=alphabets][value=scripts]")
    wait_saved(popup, before)
    popup.wait_for_selector("#explain[data-state=scripts]", timeout=30_000)
    assert "no choice here closes that gap" in popup.inner_text("#explain")
    popup.close()
    sent = send(browser, "chatgpt.com", FRENCH)
    body = body_after(sent, HEADERS["fr"])
    assert len(body) == len(FRENCH) and body != FRENCH
    assert FRENCH not in squash(sent)
    for got, typed in zip(body, FRENCH, strict=True):
        assert (got == " ") == (typed == " ")
        if typed != " ":
            assert alphabets.script_of(got) in ("ascii", "latin"), repr(got)
    assert any(alphabets.script_of(c) == "latin" for c in body), "no accented letter arrived"
    receipt = wait_receipts(browser, "chatgpt")[-1]["receipt"]
    assert receipt["latin_marks"] is True and receipt["header_language"] == "fr"


def test_everything_into_ascii_chosen_in_the_popup(browser: Browser) -> None:
    """The per-site option: the Korean prompt then leaves as printable ASCII."""
    popup = browser.popup("chatgpt.com")
    before = popup.evaluate("() => document.body.dataset.saved || null")
    popup.wait_for_selector("#explain[data-state=fold]", timeout=30_000)
    assert "Accented Latin letters are sent as their plain letter" in popup.inner_text("#explain")
    popup.check("input[name=alphabets][value=ascii]")
    wait_saved(popup, before)
    assert browser.storage()["settings"]["sites"]["chatgpt"]["alphabets"] == "ascii"
    # The explanation is computed by the core after the save; the newest answer must win.
    popup.wait_for_selector("#explain[data-state=ascii]", timeout=30_000)
    assert "hidden" in popup.inner_text("#explain")
    popup.close()
    sent = send(browser, "chatgpt.com", KOREAN)
    body = body_after(sent, HEADERS["ko"])
    assert len(body) == len(KOREAN)
    assert all(c == " " or c in krr.ALPHABET for c in body), body
    receipt = wait_receipts(browser, "chatgpt")[-1]["receipt"]
    assert receipt["alphabets"] == "ascii" and receipt["unsupported_chars"] == len(
        KOREAN.replace(" ", "")
    )
