"""Ask before spending (issue 30.5): ``POST /v1/budget/estimate`` says what a chat request's
answer would charge each document, generating and charging nothing, and the answer then
charges exactly that."""

from __future__ import annotations

import pytest

from tests.companion.test_budget import api  # noqa: F401 - the fixture

COMPARED = ("document_id", "document", "charge_rdp", "spent_rdp", "remaining_rdp", "answers")


def _body(question, **extra):
    return {
        "messages": [{"role": "user", "content": question}],
        "collection": "med",
        "defense": "bounded",
        "max_tokens": 8,
        **extra,
    }


def _state(client):
    return client.get("/v1/budget").json(), client.get("/v1/budget/log").json()


def _estimate(client, body):
    response = client.post("/v1/budget/estimate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _charged(veil):
    return [{k: d[k] for k in COMPARED} for d in veil["budget"]["documents"]]


def test_the_estimate_charges_nothing_and_the_answer_charges_what_it_said(api):  # noqa: F811
    before = _state(api)
    estimate = _estimate(api, _body("gout?"))
    assert _state(api) == before  # declined: nothing charged, nothing logged
    assert estimate["charges"] and estimate["formal"] and estimate["defense"] == "bounded"
    names = sorted(d["document"] for d in estimate["documents"])
    assert names == ["gout-fever.txt", "gout.txt"]
    for d in estimate["documents"]:
        assert d["spent_rdp_before"] == 0.0 and d["charge_rdp"] == estimate["charge_rdp"] > 0
        assert d["spent_rdp"] + d["remaining_rdp"] == pytest.approx(
            estimate["budget"]["budget_rdp"]
        )
    assert "Nothing has been charged yet" in estimate["note"]
    assert _estimate(api, _body("gout?")) == estimate  # asking twice changes nothing either
    answer = api.post("/v1/chat/completions", json=_body("gout?"))
    assert answer.status_code == 200, answer.text
    veil = answer.json()["veil"]
    assert _charged(veil) == [{k: d[k] for k in COMPARED} for d in estimate["documents"]]
    rows = {d["document_id"]: d for d in api.get("/v1/budget").json()["documents"]}
    for d in estimate["documents"]:
        assert rows[d["document_id"]]["spent_rdp"] == d["spent_rdp"]
        assert rows[d["document_id"]]["answers"] == 1
    # the next estimate starts from the new spend (and says the figures after it)
    again = _estimate(api, _body("gout?"))
    first = {d["document_id"]: d for d in estimate["documents"]}
    for d in again["documents"]:
        assert d["spent_rdp_before"] == pytest.approx(first[d["document_id"]]["spent_rdp"])


def test_a_spent_document_is_shown_left_out_and_nothing_would_be_charged(api):  # noqa: F811
    assert api.post("/v1/chat/completions", json=_body("cats?")).status_code == 200
    estimate = _estimate(api, _body("cats?"))
    assert not estimate["charges"] and estimate["documents"] == []
    assert [d["document"] for d in estimate["excluded"]] == ["cats.txt"]
    assert "too little budget left" in estimate["note"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"defense": "none"}, "no differential-privacy guarantee"),
        ({"defense": "copy_aware"}, "no differential-privacy guarantee"),
        ({"collection": None}, "Nothing is retrieved"),
    ],
)
def test_an_answer_that_charges_nothing_says_so(api, extra, needle):  # noqa: F811
    before = _state(api)
    estimate = _estimate(api, _body("gout?", **extra))
    assert not estimate["charges"] and estimate["documents"] == [] and needle in estimate["note"]
    assert api.post("/v1/chat/completions", json=_body("gout?", **extra)).status_code == 200
    assert _state(api)[0] == before[0]  # and the answer indeed charged nothing


def test_a_follow_up_is_estimated_with_its_conversation(api):  # noqa: F811
    """The stored history joins the retrieval query exactly as the answer's will."""
    conv = api.post("/v1/conversations", json={"title": "t"}).json()["id"]
    plain = _body("asthma?", conversation_id=conv, defense="none")  # charges nothing
    first = api.post("/v1/chat/completions", json=plain)
    assert first.status_code == 200, first.text
    follow = _body("and cats?", conversation_id=conv, retrieval_query="user_turns")
    alone = _estimate(api, _body("and cats?"))
    estimate = _estimate(api, follow)
    assert {d["document"] for d in alone["documents"]} == {"cats.txt"}
    assert {d["document"] for d in estimate["documents"]} == {"asthma.txt", "cats.txt"}
    veil = api.post("/v1/chat/completions", json=follow).json()["veil"]
    assert _charged(veil) == [{k: d[k] for k in COMPARED} for d in estimate["documents"]]
    assert {c["document"] for c in veil["citations"]} == {"asthma.txt", "cats.txt"}


def test_bad_requests_are_clear_4xx_and_guests_are_refused(api):  # noqa: F811
    cases = [
        (_body("gout?", collection="nope"), 404, "no collection named 'nope'"),
        (_body("gout?", conversation_id="conv_" + "0" * 24), 404, "no conversation"),
        (_body("gout?", replace_from=3), 400, "send conversation_id too"),
        (_body("gout?", max_tokens=10**6), 400, "over this companion's limit"),
    ]
    for body, status, needle in cases:
        response = api.post("/v1/budget/estimate", json=body)
        assert response.status_code == status, response.text
        assert needle in response.json()["error"]["message"]
    key = api.post("/v1/keys", json={"collection": "med", "defense": "bounded"}).json()["key"]
    guest = api.post(
        "/v1/budget/estimate", json=_body("gout?"), headers={"Authorization": f"Bearer {key}"}
    )
    assert guest.status_code == 403 and guest.json()["error"]["code"] == "guest_forbidden"


# ------------------------------------------------- budget_confirm: exactly that, or nothing


def _chat_status(client, body, **headers):
    return client.post("/v1/chat/completions", json=body, headers=headers)


def test_a_confirmed_estimate_is_charged_exactly_or_refused_with_nothing_charged(api):  # noqa: F811
    small = {"defense_params": {"epsilon": 1.0}}  # many answers per document
    estimate = _estimate(api, _body("gout?", **small))
    assert len(estimate["confirm"]) == 32 and estimate["charges"]
    ok = _chat_status(api, _body("gout?", budget_confirm=estimate["confirm"], **small))
    assert ok.status_code == 200, ok.text
    assert _charged(ok.json()["veil"]) == [
        {k: d[k] for k in COMPARED} for d in estimate["documents"]
    ]
    # shown, then something else charges one of its documents: the old confirm is refused
    stale = _estimate(api, _body("gout?", **small))
    assert stale["confirm"] != estimate["confirm"]  # the spends moved on
    assert _chat_status(api, _body("fever?", **small)).status_code == 200
    before = _state(api)
    for stream in (False, True):
        refused = _chat_status(
            api, _body("gout?", budget_confirm=stale["confirm"], stream=stream, **small)
        )
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "state_conflict" and error["param"] == "budget_confirm"
        assert "nothing was charged" in error["message"]
        assert _state(api) == before  # no charge, no log row
    made_up = _chat_status(api, _body("gout?", budget_confirm="0" * 32, **small))
    assert made_up.status_code == 409 and _state(api) == before
    # asked again, it goes through
    fresh = _estimate(api, _body("gout?", **small))
    assert _chat_status(api, _body("gout?", budget_confirm=fresh["confirm"], **small)).is_success


def test_budget_confirm_is_the_owners_and_only_where_something_is_charged(api):  # noqa: F811
    assert _estimate(api, _body("gout?", defense="none"))["confirm"] is None
    assert _estimate(api, _body("cats?", collection=None))["confirm"] is None
    made = api.post("/v1/keys", json={"collection": "med", "defense": "bounded"}).json()
    guest = {"Authorization": f"Bearer {made['key']}"}
    body = {"messages": [{"role": "user", "content": "gout?"}], "budget_confirm": "0" * 32}
    refused = api.post("/v1/chat/completions", json=body, headers=guest)
    assert refused.status_code == 403 and refused.json()["error"]["param"] == "budget_confirm"
    preview = {"X-Veil-Preview-Guest": str(made["guest_key"]["id"])}
    assert api.post("/v1/chat/completions", json=body, headers=preview).status_code == 403
    typo = api.post("/v1/chat/completions", json=_body("gout?", budget_confrim="x"))
    assert typo.status_code == 400 and "budget_confirm" in typo.json()["error"]["message"]
