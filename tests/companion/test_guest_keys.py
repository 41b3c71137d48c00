"""Guest keys: created, listed and revoked by the owner; a guest only chats, and sees no chunk text.

The app is the real one (token, Host, Origin checks, every router) with a tiny
random chat model and a tiny model behind the audit routes, so nothing here
loads a real model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from companion.audit.tiny import make_tiny_model
from companion.cli import main as veil
from companion.keys import GUEST_ROUTES, KEY_PREFIX, KeyStore, keys_path, parse_expiry
from companion.models import load_causal_lm
from py_core.errors import InvalidParameterError
from tests.companion.audit_support import SMALL, opener_for
from tests.companion.fakes import ConstantEmbedder, free_port, serve_http

BASE = "http://127.0.0.1:8765"
NOTE = (
    b"Patient: Maria Lopez (maria.lopez@example.org, phone (415) 555-0187) has a dry cough. "
    b"Doctor: take amoxicillin 500 mg three times a day for seven days."
)
OTHER = b"Quarterly report: the Zanzibar office sold 1200 umbrellas in March."
# Pieces of the chunk text that must never reach a guest.
SECRETS = ("Maria Lopez", "maria.lopez@example.org", "555-0187", "amoxicillin")

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

# Who may call what.  Everything in the OpenAPI schema not listed here is the owner's.
EXPECTED_GUEST = {
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("GET", "/v1/defenses"),
}
PUBLIC = {("GET", "/healthz")}  # no token at all
PATH_VALUES = {"doc_id": "999999", "name": "no-such", "job_id": "nope", "key_id": "999999",
               "conv_id": "conv_" + "0" * 24, "model_id": "no-such-model"}  # fmt: skip


def _schema_routes() -> list[tuple[str, str]]:
    """Every (method, path) of the app's OpenAPI schema."""
    from companion.app import create_app
    from companion.settings import Settings

    with tempfile.TemporaryDirectory() as home:
        app = create_app(Settings(home=Path(home), preload_model=False))
        paths = app.openapi()["paths"]
    return sorted((m.upper(), p) for p, ops in paths.items() for m in ops)


ROUTES = _schema_routes()
OWNER_ROUTES = [r for r in ROUTES if r not in EXPECTED_GUEST | PUBLIC]


def _tiny_chat_model(folder: Path) -> Path:
    from transformers import AutoTokenizer

    make_tiny_model(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def _app(home: Path, folder: Path, opener: Any, **settings: Any) -> Any:
    """The real app (every router, token, Host and Origin checks) on the tiny models."""
    from companion.api.deps import get_audit_jobs
    from companion.app import create_app
    from companion.audit.jobs import JobManager
    from companion.audit.service import ModelPool
    from companion.settings import Settings

    app = create_app(
        Settings(home=home, model=str(folder), preload_model=False, **settings),
        embedder=ConstantEmbedder(1.0),
    )
    jobs = JobManager(pool=ModelPool(opener=opener), setup_config=SMALL)
    app.dependency_overrides[get_audit_jobs] = lambda: jobs
    return app


@contextlib.contextmanager
def tiny_client(tmp_path: Path, monkeypatch: Any) -> Iterator[TestClient]:
    """The real app on a tiny chat model in its own home, with the owner's token set and
    torch on one thread (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("VEIL_HOME", str(tmp_path / "home"))
    folder = _tiny_chat_model(tmp_path / "tiny")
    loaded = load_causal_lm(str(folder), device="cpu")
    app = _app(
        tmp_path / "home",
        folder,
        opener_for(loaded),
        retrieval_top_k=2,
        default_max_tokens=4,
    )
    try:
        with TestClient(app, base_url=BASE) as test_client:
            test_client.headers["Authorization"] = f"Bearer {app.state.token}"
            yield test_client
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """The real app with a tiny chat model, two collections, and the owner's token set."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("VEIL_HOME", str(home))
    folder = _tiny_chat_model(tmp_path_factory.mktemp("tiny"))
    loaded = load_causal_lm(str(folder), device="cpu")
    app = _app(
        home,
        folder,
        opener_for(loaded),
        retrieval_top_k=2,
        default_max_tokens=6,
        allow_seed=True,  # even then a guest cannot fix the seed
        # The documents' own lifetime budgets (companion/rag/budget.py) are not what these
        # tests are about: large enough never to run out here.
        document_budget_epsilon=1e9,
    )
    with TestClient(app, base_url=BASE) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app.state.token}"
        for name, data, collection in (
            ("visit.txt", NOTE, "clinic"),
            ("report.txt", OTHER, "sales"),
        ):
            response = test_client.post(
                "/v1/documents",
                files=[("files", (name, data, "text/plain"))],
                data={"collection": collection},
            )
            assert response.status_code == 200, response.text
        test_client.home = home  # type: ignore[attr-defined]
        yield test_client
    mp.undo()
    torch.set_num_threads(before)


def _error(response):
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


def _new_key(client, **terms) -> str:
    body = {"collection": "clinic", "defense": "bounded", **terms}
    response = client.post("/v1/keys", json=body)
    assert response.status_code == 201, response.text
    raw = response.json()["key"]
    assert raw.startswith(KEY_PREFIX)
    return str(raw)


def _as(raw: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}"}


def _ask(**extra):
    return {"messages": [{"role": "user", "content": "What should the patient take?"}], **extra}


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


# --------------------------------------------------------------- create / list / revoke


def test_keys_are_created_listed_and_revoked_through_the_api(client):
    """POST creates (the key shown once), GET lists without it, DELETE revokes at once."""
    response = client.post(
        "/v1/keys",
        json={
            "collection": "clinic",
            "defense": "bounded",
            "defense_params": {"epsilon": 4},
            "budget": 20,
            "expires": "7d",
            "allow_titles": True,
            "label": "Ada's phone",
        },
    )
    assert response.status_code == 201, response.text
    created = response.json()
    raw, info = created["key"], created["guest_key"]
    assert raw.startswith(KEY_PREFIX) and len(raw) > len(KEY_PREFIX) + 40
    assert info["defense"] == "bounded" and info["defense_params"]["epsilon"] == 4.0
    assert info["defense_params"]["clip"] == 4.0  # the defaults are fixed at creation too
    assert info["budget"] == 20 and info["spent"] == 0 and info["status"] == "active"
    assert info["expires"] > time.time() + 6 * 86400
    listed = client.get("/v1/keys").json()["data"]
    assert any(k["id"] == info["id"] and k["label"] == "Ada's phone" for k in listed)
    assert raw not in json.dumps(listed) and hashlib.sha256(raw.encode()).hexdigest() not in (
        json.dumps(listed)
    )
    assert client.get("/v1/models", headers=_as(raw)).status_code == 200
    revoked = client.delete(f"/v1/keys/{info['id']}")
    assert revoked.status_code == 200 and revoked.json()["guest_key"]["status"] == "revoked"
    refused = client.get("/v1/models", headers=_as(raw))
    assert refused.status_code == 401 and _error(refused)["code"] == "key_revoked"
    assert _error(client.delete("/v1/keys/999999"))["code"] == "not_found"


@pytest.mark.parametrize(
    ("terms", "needle"),
    [
        ({"defense": "magic"}, "unknown defense"),
        ({"defense_params": {"epsilon": -1}}, "epsilon"),
        ({"defense_params": {"surprise": 1}}, "surprise"),
        ({"collection": "nowhere"}, "no collection named 'nowhere'"),
        ({"collection": "bad name!"}, "collection name"),
        ({"defense": "copy_aware", "budget": 5}, "no formal guarantee"),
        ({"budget": -2}, "budget"),
        ({"expires": "2001-01-01"}, "in the past"),
        ({"expires": "soon"}, "duration"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_bad_key_terms_are_refused_with_a_clear_400(client, terms, needle):
    """A key's terms are validated at creation (by the defense registry) with a clear message."""
    body = {"collection": "clinic", "defense": "bounded", **terms}
    response = client.post("/v1/keys", json=body)
    assert response.status_code == 400, response.text
    assert needle in _error(response)["message"]


def test_keys_cli_creates_lists_and_revokes_on_the_store_directly(client, capsys):
    """`veil keys` works on the key store itself; the running app sees its changes at once."""
    home = str(client.home)
    assert veil(["keys", "--home", home, "create", "--collection", "nowhere", "--defense",
                 "bounded"]) == 2  # fmt: skip
    assert "no collection named 'nowhere'" in capsys.readouterr().err
    code = veil(
        [
            "keys", "--home", home, "create", "--collection", "clinic", "--defense", "bounded",
            "--param", "epsilon=2", "--budget", "10", "--expires", "30d", "--label", "cli",
        ]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    raw = out.splitlines()[0]
    assert raw.startswith(KEY_PREFIX) and "shown only now" in out
    assert client.get("/v1/models", headers=_as(raw)).status_code == 200
    assert veil(["keys", "--home", home, "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    mine = next(k for k in listed if k["label"] == "cli")
    assert mine["defense_params"]["epsilon"] == 2.0 and mine["budget"] == 10
    assert veil(["keys", "--home", home, "list"]) == 0
    table = capsys.readouterr().out
    assert "cli" in table and "active" in table and raw not in table
    assert veil(["keys", "--home", home, "revoke", str(mine["id"])]) == 0
    assert "revoked" in capsys.readouterr().out
    refused = client.get("/v1/models", headers=_as(raw))
    assert refused.status_code == 401 and _error(refused)["code"] == "key_revoked"
    assert veil(["keys", "--home", home, "revoke", "999999"]) == 2
    assert veil(["keys", "--home", home, "create", "--collection", "clinic", "--defense",
                 "bounded", "--param", "oops"]) == 2  # fmt: skip
    assert "NAME=VALUE" in capsys.readouterr().err


def test_keys_are_hashed_at_rest_in_a_private_file(tmp_path):
    """Only the key's SHA-256 is stored, in a file of mode 0600."""
    store = KeyStore(keys_path(tmp_path))
    _key, raw = store.create(collection="clinic", defense="bounded")
    store.authenticate(raw)
    files = [p for p in tmp_path.iterdir() if p.name.startswith("keys.sqlite3")]
    data = b"".join(p.read_bytes() for p in files)
    secret = raw[len(KEY_PREFIX) :]
    assert secret.encode() not in data and raw.encode() not in data
    assert hashlib.sha256(raw.encode()).hexdigest().encode() in data
    assert (keys_path(tmp_path).stat().st_mode & 0o777) == 0o600


def test_keys_are_compared_in_constant_time(tmp_path, monkeypatch):
    """Every stored digest is compared with hmac.compare_digest, with no early exit."""
    import companion.keys

    store = KeyStore(keys_path(tmp_path))
    raws = [store.create(collection="c", defense="none")[1] for _ in range(3)]
    calls: list[tuple[bytes, bytes]] = []
    real = companion.keys.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(companion.keys.hmac, "compare_digest", spy)
    found = store.authenticate(raws[0])
    assert found is not None and found.id == 1
    assert len(calls) == 3  # not stopped at the first (matching) row
    assert store.authenticate(KEY_PREFIX + "guess") is None and len(calls) == 6


def test_expired_keys_are_refused_at_once(client):
    """A key past its expiry gets 401 key_expired on its next request."""
    raw = _new_key(client, expires="1h")
    assert client.get("/v1/models", headers=_as(raw)).status_code == 200
    digest = hashlib.sha256(raw.encode()).hexdigest()
    with sqlite3.connect(keys_path(client.home)) as conn:
        conn.execute(
            "UPDATE guest_keys SET expires = ? WHERE key_hash = ?", (time.time() - 1, digest)
        )
    conn.close()
    refused = client.get("/v1/models", headers=_as(raw))
    assert refused.status_code == 401 and _error(refused)["code"] == "key_expired"
    wrong = client.get("/v1/models", headers=_as(raw[:-2] + "xx"))
    assert wrong.status_code == 401 and _error(wrong)["code"] == "unauthorized"


def test_expiry_parsing():
    """Durations and ISO dates (UTC when naive); past or malformed expiries are refused."""
    now = 1_000_000.0
    assert parse_expiry("30d", now) == now + 30 * 86400
    assert parse_expiry("12h", now) == now + 12 * 3600
    assert parse_expiry("90m", now) == now + 5400
    assert parse_expiry(None, now) is None and parse_expiry("never", now) is None
    assert parse_expiry("2100-01-01", now) == 4102444800.0
    for bad in ("yesterday", "0d", "1970-01-02"):
        with pytest.raises(InvalidParameterError):
            parse_expiry(bad, now)


# ------------------------------------------------------------------- the route table


def test_the_route_table_covers_every_route():
    """Every route in the schema is classified, and the guest routes are exactly the three."""
    assert GUEST_ROUTES == EXPECTED_GUEST
    assert set(ROUTES) == set(OWNER_ROUTES) | EXPECTED_GUEST | PUBLIC
    assert set(ROUTES) >= EXPECTED_GUEST | PUBLIC
    assert ("POST", "/v1/keys") in OWNER_ROUTES and ("POST", "/v1/search") in OWNER_ROUTES


def _call(client, method, path, headers):
    url = path.format(**PATH_VALUES)
    kwargs: dict[str, Any] = {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
    if url.endswith("/events"):
        with client.stream(method, url, headers=headers) as response:
            response.read()
            return response
    return client.request(method, url, headers=headers, **kwargs)


@pytest.mark.parametrize(("method", "path"), OWNER_ROUTES)
def test_a_guest_key_cannot_reach_any_owner_route(client, method, path):
    """Every owner route in the OpenAPI schema answers 403 to a guest key, and not to the owner."""
    raw = _new_key(client)
    response = _call(client, method, path, _as(raw))
    assert response.status_code == 403, (method, path, response.text)
    assert _error(response)["code"] == "guest_forbidden"
    owner = _call(client, method, path, {})
    assert owner.status_code not in (401, 403), (method, path, owner.text)


def test_token_paths_outside_the_schema_are_the_owners_too(client):
    """Token-checked paths the schema does not list (mounted apps such as /mcp, unknown
    paths) refuse a guest key before routing: the guest table is an allowlist."""
    from companion.security import TOKEN_PREFIXES

    raw = _new_key(client)
    schema = {p for _, p in ROUTES}
    mounted = {
        str(r.path)
        for r in client.app.routes
        if str(getattr(r, "path", "")).startswith(TOKEN_PREFIXES) and r.path not in schema
    }
    for path in sorted(mounted | {"/v1/no-such-route", "/v1/chat/completions/"}):
        for method in ("GET", "POST", "DELETE"):
            response = client.request(method, path, headers=_as(raw))
            assert response.status_code == 403, (method, path, response.text)
            assert _error(response)["code"] == "guest_forbidden"


def test_every_schema_route_is_tested():
    """The table-driven test runs over the routes of the app as it is now, all of them."""
    assert set(OWNER_ROUTES) == set(_schema_routes()) - EXPECTED_GUEST - PUBLIC
    assert OWNER_ROUTES  # and there are owner routes to test


def test_the_access_dependency_refuses_guests_by_route_template():
    """check_access (a dependency of every route) refuses a guest on an owner route by itself."""
    from fastapi import Request
    from fastapi.routing import APIRoute

    from companion.api.deps import check_access
    from companion.errors import APIError
    from companion.keys import Principal

    guest = Principal("guest", key=None)

    def request(method, template):
        route = APIRoute(template, endpoint=lambda: None, methods=[method])
        scope = {
            "type": "http",
            "method": method,
            "path": template,
            "headers": [],
            "route": route,
            "veil.principal": guest,
        }
        return Request(scope)

    check_access(request("POST", "/v1/chat/completions"))
    with pytest.raises(APIError) as exc:
        check_access(request("DELETE", "/v1/documents/{doc_id}"))
    assert exc.value.status == 403
    check_access(Request({"type": "http", "method": "GET", "path": "/v1/documents",
                          "headers": []}))  # fmt: skip  # no principal: the middleware decides


# ---------------------------------------------------------------------------- chatting


def test_guest_chat_uses_the_keys_terms_and_carries_no_chunk_text(client):
    """A guest's answer: the key's collection and defense, no chunk text, no source count."""
    owner = client.post("/v1/chat/completions", json=_ask(collection="clinic", max_tokens=4))
    assert owner.status_code == 200, owner.text
    assert _leaks(json.dumps(owner.json()["veil"]))  # the owner's citations carry the text
    raw = _new_key(client, defense_params={"epsilon": 6})
    response = client.post("/v1/chat/completions", json=_ask(max_tokens=4), headers=_as(raw))
    assert response.status_code == 200, response.text
    body = response.json()
    veil_info = body["veil"]
    assert veil_info["receipt"]["mechanism"] == "bounded"
    assert veil_info["receipt"]["params"]["epsilon"] == 6.0
    # how many sources were used changes with the store: outside the defense's guarantee
    assert veil_info["citations"] == [] and "sources" not in veil_info
    assert veil_info["guest"]["collection"] == "clinic"
    assert not _leaks(response.text)
    # Titles the owner allowed are withheld under a formal defense (they would name what the
    # (ε, δ) guarantee hides) ...
    titled = _new_key(client, allow_titles=True)
    response = client.post("/v1/chat/completions", json=_ask(max_tokens=4), headers=_as(titled))
    assert response.json()["veil"]["citations"] == []
    # ... and shown, the document's name and nothing else, under a defense that claims none.
    plain = _new_key(client, allow_titles=True, defense="copy_aware")
    response = client.post("/v1/chat/completions", json=_ask(max_tokens=4), headers=_as(plain))
    assert response.json()["veil"]["citations"] == [{"n": 1, "document": "visit.txt"}]
    assert not _leaks(response.text)


def test_guest_streaming_carries_no_chunk_text(client):
    """Streamed, the final chunk's veil object has the receipt and no chunk text either."""
    raw = _new_key(client)
    with client.stream(
        "POST", "/v1/chat/completions", json=_ask(stream=True, max_tokens=4), headers=_as(raw)
    ) as response:
        assert response.status_code == 200
        text = response.read().decode()
    lines = [line for line in text.splitlines() if line]
    assert lines[-1] == "data: [DONE]"
    final = json.loads(lines[-2][6:])
    assert final["veil"]["citations"] == [] and "sources" not in final["veil"]
    assert final["veil"]["receipt"]["mechanism"] == "bounded"
    assert not _leaks(text)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"collection": "sales"}, "collection"),
        ({"defense": "none"}, "defense"),
        ({"defense_params": {"epsilon": 100}}, "defense_params"),
        ({"defense_params": {"surprise": 1}}, "defense_params"),
        ({"retrieval_top_k": 20}, "retrieval_top_k"),
        ({"seed": 1}, "seed"),
    ],
)
def test_a_guest_cannot_change_the_keys_terms(client, extra, param):
    """Asking for another collection, defense, parameters, depth or a seed is refused, not ignored."""
    raw = _new_key(client)
    response = client.post("/v1/chat/completions", json=_ask(**extra), headers=_as(raw))
    assert response.status_code == 403, response.text
    error = _error(response)
    assert error["code"] == "guest_forbidden" and error["param"] == param


def test_a_guest_may_restate_the_keys_own_terms(client):
    """The key's own collection, defense and parameters, sent explicitly, are accepted."""
    raw = _new_key(client, defense_params={"epsilon": 4})
    body = _ask(collection="clinic", defense="bounded", defense_params={"epsilon": 4}, max_tokens=2)
    assert client.post("/v1/chat/completions", json=body, headers=_as(raw)).status_code == 200


def test_a_keys_budget_is_charged_the_calibrated_epsilon_and_enforced(client):
    """Each answer costs its calibrated epsilon, charged first; past the cap: 403, key unchanged."""
    raw = _new_key(client, defense_params={"epsilon": 1}, budget=2.5)
    # two different questions (a repeat is served again at no cost: the next test)
    for question in ("What should patient 1041 take?", "What should patient 2210 take?"):
        asked = {"messages": [{"role": "user", "content": question}], "max_tokens": 2}
        ok = client.post("/v1/chat/completions", json=asked, headers=_as(raw))
        assert ok.status_code == 200, ok.text
    assert ok.json()["veil"]["guest"]["spent"] == pytest.approx(2.0, abs=1e-6)
    third = {
        "messages": [{"role": "user", "content": "What should patient 3307 take?"}],
        "max_tokens": 2,
    }
    spent = client.post("/v1/chat/completions", json=third, headers=_as(raw))
    assert spent.status_code == 403 and _error(spent)["code"] == "guest_budget_spent"
    assert "budget is spent" in _error(spent)["message"]
    info = next(k for k in client.get("/v1/keys").json()["data"] if k["budget"] == 2.5)
    assert info["answers"] == 2 and info["spent"] == pytest.approx(2.0, abs=1e-6)
    assert info["remaining"] == pytest.approx(0.5, abs=1e-6)
    unlimited = _new_key(client, defense="copy_aware")  # not formal: nothing to charge
    response = client.post("/v1/chat/completions", json=_ask(max_tokens=2), headers=_as(unlimited))
    assert response.json()["veil"]["guest"]["spent"] == 0


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Host": "evil.example"}, "forbidden_host"),
        ({"Host": "127.0.0.1.evil.example:8765"}, "forbidden_host"),
        ({"Origin": "https://evil.example"}, "forbidden_origin"),
        ({"Origin": "null"}, "forbidden_origin"),
    ],
)
def test_host_and_origin_checks_apply_to_guest_keys(client, headers, code):
    """A guest key does not get past the Host (DNS rebinding) and Origin checks."""
    raw = _new_key(client)
    response = client.post(
        "/v1/chat/completions", json=_ask(max_tokens=2), headers={**_as(raw), **headers}
    )
    assert response.status_code == 403 and _error(response)["code"] == code


def test_the_openai_sdk_works_with_a_guest_key(client):
    """The official OpenAI SDK with a guest key as its API key: models, chat, stream; revoked: 401."""
    from openai import AuthenticationError, OpenAI, PermissionDeniedError

    created = client.post("/v1/keys", json={"collection": "clinic", "defense": "bounded"}).json()
    raw, key_id = created["key"], created["guest_key"]["id"]
    sdk = OpenAI(base_url=f"{BASE}/v1", api_key=raw, http_client=client, max_retries=0)
    model = sdk.models.list().data[0].id
    completion = sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What should I take?"}], max_tokens=4
    )
    assert completion.model_extra is not None
    veil_info = completion.model_extra["veil"]
    assert veil_info["receipt"]["mechanism"] == "bounded" and veil_info["citations"] == []
    assert not _leaks(json.dumps(completion.model_dump()))
    stream = sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=3,
        stream=True,
    )
    chunks = list(stream)
    extra = chunks[-1].model_extra
    assert extra is not None and extra["veil"]["citations"] == []
    with pytest.raises(PermissionDeniedError, match="collection"):
        sdk.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"collection": "sales"},
        )
    client.delete(f"/v1/keys/{key_id}")
    with pytest.raises(AuthenticationError, match="revoked"):
        sdk.models.list()


# ---------------------------------------------------------------------------- the page


@pytest.mark.slow
def test_the_chat_page_creates_lists_and_revokes_guest_keys(tmp_path):
    """In Chromium: the owner creates a key (shown once), sees it listed, and revokes it."""
    import shutil

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed")
    import httpx
    from playwright.sync_api import sync_playwright

    folder = _tiny_chat_model(tmp_path / "tiny")
    port = free_port()
    app = _app(tmp_path, folder, None, port=port)
    base = f"http://127.0.0.1:{port}"
    with serve_http(app, port, timeout=60):
        owner = {"Authorization": f"Bearer {app.state.token}"}
        upload = httpx.post(
            f"{base}/v1/documents",
            headers=owner,
            files=[("files", ("visit.txt", NOTE, "text/plain"))],
            data={"collection": "clinic"},
        )
        assert upload.status_code == 200, upload.text
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(base + "/")
            page.fill("#token", app.state.token)
            page.click("#save-token")
            page.wait_for_selector("#token-state:has-text('Connected')")
            page.wait_for_selector("#collection option[value='clinic']", state="attached")
            page.select_option("#collection", "clinic")
            page.select_option("#defense", "bounded")
            page.fill("#key-label", "for Ada")
            page.fill("#key-budget", "20")
            page.click("#key-create")
            page.wait_for_selector("#key-new:not([hidden])")
            raw = page.inner_text("#key-value").strip()
            assert raw.startswith(KEY_PREFIX)
            page.wait_for_selector("#key-list li:has-text('for Ada')")
            item = page.inner_text("#key-list li:has-text('for Ada')")
            assert "clinic" in item and "bounded" in item and "active" in item
            guest = {"Authorization": f"Bearer {raw}"}
            assert httpx.get(f"{base}/v1/models", headers=guest).status_code == 200
            page.on("dialog", lambda dialog: dialog.accept())
            page.click("#key-list li:has-text('for Ada') button")
            page.wait_for_selector("#key-list li.revoked:has-text('for Ada')")
            assert httpx.get(f"{base}/v1/models", headers=guest).status_code == 401
            browser.close()


# ------------------------------------------------------------- the PAD evaluation's guest path


@pytest.mark.parametrize("allow_titles", [False, True])
def test_the_pad_attacks_sent_with_a_guest_key_leak_nothing_through_citations(
    tmp_path, allow_titles
):
    """evals/pad/guest.py: the owner's citations carry the records, a guest key's carry nothing."""
    from evals.pad.config import Config
    from evals.pad.guest import run_guest_check

    folder = _tiny_chat_model(tmp_path / "tiny")
    small = Config(
        records=4, attacks=2, targeted=1, benign=0, attack_tokens=1, benign_tokens=1, smoke=True
    )
    result = run_guest_check(
        small, model=str(folder), embedder=ConstantEmbedder(1.0), allow_titles=allow_titles
    )
    assert result["prompts"] == 3
    assert result["owner"]["max_longest_run"] >= 20 and result["owner"]["pii_values_found"] > 0
    assert result["owner"]["citations_with_text"] == 3 * small.top_k
    # the owner's citations show the chunks were retrieved; a guest is not told how many
    assert result["guest"]["sources"] == 0
    assert result["guest"]["max_longest_run"] == 0 and result["guest"]["pii_values_found"] == 0
    assert result["guest"]["citations_with_text"] == 0 and not result["guest_leaks"]
    assert result["guest"]["receipt_longest_run"] < 10
