"""veil mcp serve: the tools over the SDK's own client (in process, stdio, HTTP in the companion),
the /mcp endpoint's token/Host/Origin checks, and the record shared with the extension."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from companion.app import create_app
from companion.mcp.guard import Guard
from companion.mcp.record import Record, RecordStore, compare_records, parse_record, record_path
from companion.mcp.server import build_server
from companion.settings import Settings
from py_core.errors import StateError
from py_core.rootguard import api
from py_core.rootguard.cache import RootCache
from py_core.rootguard.profile import load_profile
from tests.companion.fakes import free_port, serve_http

ROOT = Path(__file__).resolve().parents[2]

#: Distinctive true values: none of them is written anywhere else in an answer.
TRUTH = {
    "age": 47,
    "height_cm": 181.3,
    "weight_kg": 93.7,
    "glucose": 117,
    "alt": 38,
    "ast": 29,
    "platelets": 263,
}
PATTERNS = [re.compile(rf"(?<![\d.]){re.escape(str(v))}(?!\d|\.\d)") for v in TRUTH.values()]


def seeded_state(truth: dict[str, float], seed: int = 3, profile: Any = None) -> dict[str, Any]:
    """A state drawn with a seeded RNG (a test, not real data) whose noisy values all differ."""
    prof = load_profile(dict(profile or api.DEFAULT_PROFILE))
    cache = RootCache.empty(prof)
    cache.draw(truth, random.Random(seed))
    state = cache.to_dict()
    noisy = api.noisy_values(profile or api.DEFAULT_PROFILE, state)
    assert all(abs(noisy[k] - v) > 2 for k, v in truth.items()), "pick another seed"
    return state


def make_record(path: Path, truth: dict[str, float] = TRUTH, state: Any = None) -> RecordStore:
    store = RecordStore(path)
    state = seeded_state(truth) if state is None else state
    record = parse_record(
        {"profile": api.DEFAULT_PROFILE, "trueValues": truth, "state": state}, "test"
    )
    store.create(record)
    return store


def leaks(text: str) -> list[str]:
    """The true values written in ``text``."""
    return [p.pattern for p in PATTERNS if p.search(text)]


def tool_json(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def exercise(client: Client) -> tuple[dict[str, Any], str]:
    """Call every tool (and a few failing calls); the answers by name, and all their text."""
    texts = []
    answers: dict[str, Any] = {}
    calls = [
        ("get_value", {"name": "weight_kg"}),
        ("get_value_again", {"name": "weight_kg"}),
        ("bmi", {"expression": "bmi"}),
        ("expression", {"expression": "weight_kg / (height_cm / 100) ** 2"}),
        ("fib4", {"expression": "fib4"}),
        ("list_values", {}),
        ("protect_text", {"text": "I am 47 years old and weigh 93.7 kg; glucose 117 mg/dL"}),
        ("protect_krr", {"text": "I weigh 93.7 kg", "krr_epsilon": 6}),
        ("bad_name", {"name": "nope"}),
        ("undeclared", {"name": "insulin"}),
        ("bad_expression", {"expression": "__import__('os')"}),
    ]
    tool_of = {
        "get_value_again": "get_value",
        "bmi": "compute",
        "expression": "compute",
        "fib4": "compute",
        "protect_krr": "protect_text",
        "bad_name": "get_value",
        "undeclared": "get_value",
        "bad_expression": "compute",
    }
    for label, args in calls:
        result = await client.call_tool(tool_of.get(label, label), args)
        text = "".join(c.text for c in result.content)
        texts.append(text)
        answers[label] = result
    return answers, "\n".join(texts)


def check_answers(answers: dict[str, Any], text: str, store: RecordStore) -> None:
    record = store.require()
    noisy = api.noisy_values(record.profile, record.state)
    value = tool_json(answers["get_value"])
    assert value["value"] == round(noisy["weight_kg"], 1) and value["kind"] == "root"
    assert tool_json(answers["get_value_again"])["value"] == value["value"]
    assert tool_json(answers["bmi"])["value"] == round(noisy["bmi"], 1)
    assert tool_json(answers["expression"])["value"] == pytest.approx(noisy["bmi"], abs=1e-5)
    fib4 = tool_json(answers["fib4"])
    assert fib4["value"] == pytest.approx(noisy["fib4"], abs=0.01) and "risk_class" in fib4
    listed = {v["name"]: v for v in tool_json(answers["list_values"])["values"]}
    described = api.describe(api.DEFAULT_PROFILE)["roots"]
    for name in ("age", "weight_kg", "insulin"):
        assert listed[name]["epsilon_per_privacy_unit"] == described[name]["epsilon"]
        assert listed[name]["epsilon_over_domain"] == described[name]["domain_epsilon"]
    assert listed["insulin"]["drawn"] is False and listed["insulin"]["value"] is None
    protected = tool_json(answers["protect_text"])
    assert f"{round(noisy['weight_kg'], 1):.1f} kg" in protected["text"]
    assert {r["name"] for r in protected["replaced"]} == {"age", "weight_kg", "glucose"}
    assert all(set(r) == {"name", "replacement"} for r in protected["replaced"])
    assert tool_json(answers["protect_krr"])["krr"]["epsilon_per_char"] == pytest.approx(6, 1e-3)
    for label in ("bad_name", "undeclared", "bad_expression"):
        assert answers[label].is_error
    assert "not declared" in answers["undeclared"].content[0].text
    assert leaks(text) == [], "a true value left the server"
    assert len(record.state["ledger"]) == 1, "nothing is drawn twice"


def test_server_tools_in_process(tmp_path):
    """Every tool answers noisy values only, draws nothing twice, and errors name no value."""
    store = make_record(tmp_path / "rg.json")

    async def main() -> None:
        async with Client(build_server(Guard(store))) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == {"get_value", "compute", "list_values", "protect_text"}
            answers, text = await exercise(client)
        check_answers(answers, text, store)

    anyio.run(main)


def test_a_root_is_drawn_once_when_first_asked_and_saved(tmp_path):
    """A declared root without a noisy value is drawn on first use, saved, then reused."""
    store = make_record(tmp_path / "rg.json", state=api.init_state(api.DEFAULT_PROFILE, {}))
    guard = Guard(store)
    first = guard.get_value("weight_kg")["value"]
    saved = store.require()
    assert set(saved.state["roots"]) == {"weight_kg"} and len(saved.state["ledger"]) == 1
    assert [e["event"] for e in saved.events] == ["drawn"]
    for _ in range(5):
        assert Guard(RecordStore(store.path)).get_value("weight_kg")["value"] == first
    bmi = guard.compute("bmi")
    assert set(store.require().state["roots"]) == {"weight_kg", "height_cm"}
    assert bmi["from"] == ["height_cm", "weight_kg"]
    assert len(store.require().state["ledger"]) == 2


def test_a_corrupted_record_is_refused_and_nothing_is_drawn(tmp_path):
    """A state changed outside Veil is refused by every tool; the file is left as it was."""
    store = make_record(tmp_path / "rg.json")
    data = json.loads(store.path.read_text())
    data["state"]["roots"]["weight_kg"]["index"] += 1
    store.path.write_text(json.dumps(data))
    before = store.path.read_bytes()
    with pytest.raises(StateError, match="corrupted"):
        Guard(store).get_value("weight_kg")
    assert store.path.read_bytes() == before


def test_server_over_stdio(tmp_path):
    """`veil mcp serve` over stdio, driven by the SDK's stdio client."""
    store = make_record(tmp_path / "rg.json")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "companion", "mcp", "serve", "--record", str(store.path)],
        cwd=str(ROOT),
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            answers, text = await exercise(client)
        check_answers(answers, text, store)

    anyio.run(main)


def test_serve_without_a_record_exits_with_a_clear_message(tmp_path):
    """No record: exit 2 and say how to make one (import or init)."""
    out = subprocess.run(
        [sys.executable, "-m", "companion", "mcp", "serve", "--record", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2 and "veil rootguard import" in out.stderr


# -- HTTP in the companion ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def companion(tmp_path_factory):
    home = tmp_path_factory.mktemp("veil-home")
    store = make_record(record_path(home))
    port = free_port()
    settings = Settings(home=home, port=port, preload_model=False)
    app = create_app(settings, embedder=object())
    with serve_http(app, port) as url:
        yield url, app.state.token, store, app


def test_server_over_http_in_the_companion(companion):
    """The same tools at /mcp of the companion, with the token, through the SDK's HTTP client."""
    url, token, store, _app = companion

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            answers, text = await exercise(client)
        check_answers(answers, text, store)

    anyio.run(main)


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "TOKEN", "Host": "evil.example"}, 403),
        ({"Authorization": "TOKEN", "Origin": "https://evil.example"}, 403),
        ({"Authorization": "TOKEN", "Origin": "null"}, 403),
        ({"Authorization": "TOKEN"}, 200),
    ],
)
def test_mcp_endpoint_is_behind_token_host_and_origin_checks(companion, headers, status):
    """/mcp answers only the owner's token, on a loopback Host, from no foreign Origin."""
    url, token, _store, _app = companion
    sent = {**ACCEPT, **headers}
    if sent.get("Authorization") == "TOKEN":
        sent["Authorization"] = f"Bearer {token}"
    response = httpx2.post(f"{url}/mcp", json=INIT, headers=sent, timeout=30)
    assert response.status_code == status, response.text


def test_a_guest_key_cannot_use_mcp(companion):
    """A guest key (chat over one collection only) gets 403 at /mcp."""
    url, _token, _store, app = companion
    _key, raw = app.state.keys.create(collection="c", defense="none")
    response = httpx2.post(
        f"{url}/mcp", json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {raw}"}, timeout=30
    )
    assert response.status_code == 403


# -- one record with the extension -------------------------------------------------------------


def test_record_shapes_from_the_extension_are_accepted(tmp_path):
    """The export format, the bare record chrome.storage keeps, and {rootguard: record}."""
    state = seeded_state(TRUTH)
    bare = {"profile": api.DEFAULT_PROFILE, "trueValues": TRUTH, "state": state, "events": []}
    tagged = Record(api.DEFAULT_PROFILE, dict(TRUTH), state).to_json()
    for data in (bare, {"rootguard": bare}, tagged):
        assert parse_record(data).state == state
    with pytest.raises(StateError, match="format"):
        parse_record({**tagged, "format": "something.else"})
    with pytest.raises(StateError, match="lacks state"):
        parse_record({**bare, "state": None})
    with pytest.raises(StateError, match="outside its public domain"):
        parse_record({**bare, "trueValues": {**TRUTH, "age": 300}})
    try:
        parse_record({**bare, "trueValues": {**TRUTH, "age": 300}})
    except StateError as exc:
        assert "300" not in str(exc), "an error must not repeat a true value"


def test_compare_records_same_extends_conflict():
    """Same draws: same; more roots drawn later: extends; anything else: conflict with reasons."""
    prof = load_profile(dict(api.DEFAULT_PROFILE))
    cache = RootCache.empty(prof)
    cache.draw(TRUTH, random.Random(1), names=["age"])
    one = Record(api.DEFAULT_PROFILE, dict(TRUTH), cache.to_dict())
    cache.draw(TRUTH, random.Random(2), names=["weight_kg"])
    two = Record(api.DEFAULT_PROFILE, dict(TRUTH), cache.to_dict())
    assert compare_records(one, one) == ("same", [])
    assert compare_records(one, two) == ("extends", [])
    assert compare_records(two, one)[0] == "conflict"
    other = RootCache.empty(prof)
    other.draw(TRUTH, random.Random(9), names=["age"])
    redrawn = compare_records(one, Record(api.DEFAULT_PROFILE, dict(TRUTH), other.to_dict()))
    assert redrawn[0] == "conflict" and any("drawn differently" in r for r in redrawn[1])
    profile = json.loads(json.dumps(api.DEFAULT_PROFILE))
    profile["values"]["age"]["privacy_unit"] = 5
    changed = compare_records(one, Record(profile, dict(TRUTH), one.state))
    assert any("profiles differ" in r for r in changed[1])
    truth = compare_records(one, Record(api.DEFAULT_PROFILE, {**TRUTH, "age": 48}, one.state))
    assert any("true values differ for age" in r for r in truth[1])


def veil(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "companion", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"VEIL_HOME": str(home), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def test_rootguard_init_export_import_round_trip(tmp_path):
    """init, export, import elsewhere (same record), a conflicting import refused unmerged."""
    values = tmp_path / "values.json"
    values.write_text(json.dumps(TRUTH))
    a, b = tmp_path / "a", tmp_path / "b"
    assert veil("rootguard", "init", "--values", str(values), home=a).returncode == 0
    assert veil("rootguard", "init", "--values", str(values), home=a).returncode == 2
    export = tmp_path / "export.json"
    assert veil("rootguard", "export", str(export), home=a).returncode == 0
    assert json.loads(export.read_text())["format"] == "veil.rootguard.record"
    assert export.stat().st_mode & 0o077 == 0
    assert veil("rootguard", "import", str(export), home=b).returncode == 0
    again = veil("rootguard", "import", str(export), home=b)
    assert again.returncode == 0 and "nothing changed" in again.stderr
    assert record_path(a).read_text() != "" and (
        RecordStore(record_path(a)).require().state == RecordStore(record_path(b)).require().state
    )
    c = tmp_path / "c"
    assert veil("rootguard", "init", "--values", str(values), home=c).returncode == 0
    before = record_path(c).read_bytes()
    refused = veil("rootguard", "import", str(export), home=c)
    assert refused.returncode == 2 and "drawn differently" in refused.stderr
    assert "nothing was merged" in refused.stderr
    assert record_path(c).read_bytes() == before
    shown = veil("rootguard", "show", home=c)
    assert shown.returncode == 0 and leaks(shown.stdout) == []
    replaced = veil("rootguard", "import", str(export), "--replace", home=c)
    assert replaced.returncode == 0 and record_path(c).with_name("rootguard.json.bak").exists()


def test_init_adopts_the_state_veil_perturb_keeps(tmp_path):
    """`veil rootguard init --state` takes veil perturb's state: the same noisy values."""
    values = tmp_path / "values.json"
    values.write_text(json.dumps(TRUTH))
    state = tmp_path / "state.json"
    out = subprocess.run(
        [sys.executable, "-m", "companion", "perturb", "--mode", "numbers", "--values",
         str(values), "--state", str(state)],
        input="I weigh 93.7 kg", capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0
    home = tmp_path / "h"
    adopted = veil("rootguard", "init", "--values", str(values), "--state", str(state), home=home)
    assert adopted.returncode == 0, adopted.stderr
    record = RecordStore(record_path(home)).require()
    assert record.state == json.loads(state.read_text())
    noisy = api.noisy_values(record.profile, record.state)
    assert f"{noisy['weight_kg']:.1f}" in out.stdout


# -- docs/mcp.md, as written ---------------------------------------------------------------------


def doc_snippets() -> list[dict[str, Any]]:
    text = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]


def test_docs_snippets_work_with_the_sdk_client(companion, tmp_path):
    """The stdio and HTTP snippets of docs/mcp.md connect; the proxy configuration loads."""
    from companion.mcp.proxy import load_config

    url, token, store, _app = companion
    snippets = doc_snippets()
    stdio = next(
        s["mcpServers"]["veil"]
        for s in snippets
        if "command" in s.get("mcpServers", {}).get("veil", {})
    )
    http = next(
        s["mcpServers"]["veil"]
        for s in snippets
        if "url" in s.get("mcpServers", {}).get("veil", {})
    )
    assert stdio == {"command": "veil", "args": ["mcp", "serve"]}
    assert http["type"] == "http" and http["url"] == "http://127.0.0.1:8765/mcp"
    proxy_config = next(s for s in snippets if "upstreams" in s)
    assert [u.name for u in load_config(proxy_config)] == ["clinic", "labs"]
    veil = str(Path(sys.executable).with_name("veil"))
    params = StdioServerParameters(
        command=veil, args=stdio["args"], env={"VEIL_HOME": str(store.path.parent)}
    )
    headers = {
        k: v.replace("PASTE-THE-TOKEN-FROM-~/.veil/token", token)
        for k, v in http["headers"].items()
    }

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            assert not (await client.call_tool("list_values", {})).is_error
        http_client = httpx2.AsyncClient(headers=headers)
        endpoint = http["url"].replace("http://127.0.0.1:8765", url)
        async with (
            http_client,
            Client(streamable_http_client(endpoint, http_client=http_client)) as client,
        ):
            assert not (await client.call_tool("get_value", {"name": "age"})).is_error

    anyio.run(main)
