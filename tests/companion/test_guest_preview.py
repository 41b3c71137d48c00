"""The owner previews what a guest key would receive (issue 30, point 5).

``X-Veil-Preview-Guest: <key id>`` on the owner's chat request: the key's terms and the
guest's view (no chunk text, no counts), marked as a preview, and nothing charged --
neither the key's budget nor any document's lifetime budget.
"""

from __future__ import annotations

import json

from tests.companion.test_guest_keys import _as, _ask, _leaks, _new_key, client  # noqa: F401

HEADER = "X-Veil-Preview-Guest"


def _key_id(client, raw):  # noqa: F811
    keys = client.get("/v1/keys").json()["data"]
    return next(k["id"] for k in keys if raw.startswith(k["prefix"])) if keys else None


def _spent(client, key_id):  # noqa: F811
    return next(k for k in client.get("/v1/keys").json()["data"] if k["id"] == key_id)["spent"]


def test_the_owner_sees_the_guests_view_and_nothing_is_charged(client):  # noqa: F811
    created = client.post(
        "/v1/keys", json={"collection": "clinic", "defense": "bounded", "budget": 50}
    ).json()
    raw, key_id = created["key"], created["guest_key"]["id"]
    budget_before = client.get("/v1/budget").json()
    preview = client.post(
        "/v1/chat/completions", json=_ask(max_tokens=4), headers={HEADER: str(key_id)}
    )
    assert preview.status_code == 200, preview.text
    veil = preview.json()["veil"]
    assert veil["receipt"]["mechanism"] == "bounded" and "preview" in veil
    assert veil["citations"] == [] and "sources" not in veil and not _leaks(preview.text)
    assert veil["guest"]["key_id"] == key_id and veil["guest"]["spent"] == 0
    assert _spent(client, key_id) == 0  # the key paid nothing
    assert client.get("/v1/budget").json() == budget_before  # nor did any document
    # the same question from the key itself is charged, and its view has no preview mark
    asked = client.post("/v1/chat/completions", json=_ask(max_tokens=4), headers=_as(raw))
    assert asked.status_code == 200 and "preview" not in asked.json()["veil"]
    assert _spent(client, key_id) > 0
    streamed = client.post(
        "/v1/chat/completions",
        json=_ask(max_tokens=4, stream=True),
        headers={HEADER: str(key_id)},
    )
    final = json.loads([x for x in streamed.text.splitlines() if x.startswith("data: {")][-1][6:])
    assert "preview" in final["veil"] and not _leaks(streamed.text)


def test_a_preview_names_a_live_key_and_only_the_owner_asks(client):  # noqa: F811
    raw = _new_key(client)
    created = client.post("/v1/keys", json={"collection": "clinic", "defense": "bounded"})
    key_id = created.json()["guest_key"]["id"]
    as_guest = client.post(
        "/v1/chat/completions", json=_ask(max_tokens=2), headers={**_as(raw), HEADER: "1"}
    )
    assert as_guest.status_code == 403 and HEADER in as_guest.json()["error"]["message"]
    for bad, code in (("x1", 400), ("99999", 404)):
        r = client.post("/v1/chat/completions", json=_ask(max_tokens=2), headers={HEADER: bad})
        assert r.status_code == code, r.text
    assert client.delete(f"/v1/keys/{key_id}").status_code == 200
    revoked = client.post(
        "/v1/chat/completions", json=_ask(max_tokens=2), headers={HEADER: str(key_id)}
    )
    assert revoked.status_code == 403 and "revoked" in revoked.json()["error"]["message"]
