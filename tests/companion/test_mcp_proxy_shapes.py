"""veil mcp proxy: the shape matrix -- each argument shape through the proxy to a recording
upstream, where no true value may arrive in any format (93.7, 93,7, 9.37e1, 93700 g, 564
months, 263,000/uL) -- and what strict mode refuses instead of guessing."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import random
import re
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from companion.mcp.guard import CachedNoise, Guard
from companion.mcp.proxy import Proxy, RewriteLog, Upstream
from companion.mcp.rewrite import ArgumentRefused, Rewriter
from py_core.rootguard import api
from py_core.rootguard.cache import RootCache
from py_core.rootguard.profile import load_profile
from tests.companion.mcp_leaks import true_values_written
from tests.companion.test_mcp import TRUTH, make_record, seeded_state

PROFILE = load_profile(dict(api.DEFAULT_PROFILE))
STATE = seeded_state(TRUTH)
NOISY = api.noisy_values(api.DEFAULT_PROFILE, STATE)


def leaked(value: Any) -> list[str]:
    return true_values_written(value, PROFILE, TRUTH, derived=("bmi",))


def source() -> CachedNoise:
    return CachedNoise(api.DEFAULT_PROFILE, TRUTH, STATE)


def recording_server(calls: list[dict[str, Any]]) -> Server[Any]:
    """An upstream with one tool that takes any arguments and records them as received."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "additionalProperties": True}
        return types.ListToolsResult(
            tools=[types.Tool(name="record", description="stores anything", input_schema=schema)]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        calls.append(json.loads(json.dumps(params.arguments or {})))
        return types.CallToolResult(content=[types.TextContent(type="text", text="stored")])

    return Server("recorder", on_list_tools=list_tools, on_call_tool=call_tool)


# (label, arguments): the person is 47, 181.3 cm, 93.7 kg, glucose 117 mg/dL, ALT 38, AST 29,
# platelets 263 x10^9/L.  Every row writes at least one of these; none may arrive.
SHAPES: list[tuple[str, dict[str, Any]]] = [
    # -- fields ---------------------------------------------------------------------------------
    ("flat number", {"weight_kg": 93.7}),
    ("integer field", {"age": 47}),
    ("camelCase", {"bodyWeightKg": 93.7}),
    ("nested", {"patient": {"vitals": {"weight": 93.7, "height": {"value": 181.3, "unit": "cm"}}}}),
    ("array of numbers", {"weights": [93.7, 93.7]}),
    (
        "name/value pairs",
        {"results": [{"name": "Fasting glucose", "value": 117}, {"test": "ALT", "value": "38"}]},
    ),
    ("string with unit", {"weight": "93.7 kg"}),
    ("string in lb", {"weight": "206.6 lb"}),
    ("unit in the field name", {"weight_lb": 206.6}),
    ("unit in a sibling", {"w": {"name": "weight", "value": 206.6, "unit": "lbs"}}),
    ("number as string", {"weight_kg": "93.7"}),
    ("unnamed string", {"x": "93.7"}),
    ("unnamed number", {"reading": 263}),
    ("height in metres", {"height_m": 1.813}),
    ("bare number in another unit", {"h": 1.81, "note": "m: 1.813"}),
    ("bare mmol/L in an array", {"series": [6.49, 5.2]}),
    ("glucose in mmol/L", {"glucose": "6.49 mmol/L"}),
    ("trailing zero", {"weight": "93.70 kg"}),
    ("derived value", {"bmi": 28.5}),
    ("list of strings", {"values": ["93.7 kg", "47 years"]}),
    # -- unit conversions the proxy knows for other fields ----------------------------------
    ("weight in grams", {"weight_g": 93700}),
    ("weight in grams, string", {"body_weight": "93700 g"}),
    ("age in months", {"age_months": 564}),
    ("platelets per microlitre", {"platelet_count": "263,000/uL"}),
    ("glucose in g/L", {"glycemia": "1.17 g/L"}),
    ("a field in a unit it does not say", {"platelets": 263000, "age": 564}),
    ("a unit in an unnamed key", {"mass_g": 93700}),
    ("thousands with a dot", {"platelets": "263.000/\u00b5l"}),
    # -- locale formats and notation ------------------------------------------------------------
    ("decimal comma in a field", {"weight": "93,7 kg"}),
    ("decimal comma in text", {"note": "Gewicht 93,7 kg"}),
    ("decimal comma, no unit", {"gewicht_kg": "93,7"}),
    ("thousands separator", {"note": "platelets 263,000/uL"}),
    ("thousands with spaces", {"note": "PLT 263 000 /µL"}),
    ("thousands with apostrophe", {"note": "Thrombozyten 263'000/µl"}),
    ("scientific in a field", {"weight": "9.37e1 kg"}),
    ("scientific in text", {"note": "weight 9.37E+01 kg"}),
    ("JSON number in scientific", {"mass": 9.37e1}),
    # -- free text ------------------------------------------------------------------------------
    ("free text", {"note": "I'm 47, I weigh 93.7 kg and I am 181.3 cm tall; ALT 38 U/L."}),
    ("age phrase", {"summary": "47-year-old man, glucose 117 mg/dL"}),
    ("glued units", {"note": "181.3cm, 93.7kg"}),
    ("glued to an alias", {"note": "age47 weight93.7kg ALT38"}),
    ("pair after labels", {"note": "AST/ALT 29/38"}),
    ("range after alias", {"note": "weight 93.7-95 kg"}),
    ("range with between", {"note": "weight between 93.7 and 95 kg"}),
    ("range with en dash", {"note": "weight 92\u201393.7 kg"}),
    ("list after alias", {"note": "weights: 92, 93.7 and 95 kg"}),
    ("range in a named field", {"weight_range": "93.7 to 95"}),
    ("slash pair, no labels", {"glucose_alt": "117/38"}),
    ("percent sign", {"note": "117%"}),
    ("numbers without context", {"note": "my numbers are 47 and 93.7"}),
    # -- structures inside a string -------------------------------------------------------------
    ("key=value", {"query": "w=93.7;h=181.3"}),
    ("key=value named", {"filter": "weight_kg=93.7"}),
    ("URL query", {"url": "https://api.example.org/bmi?weight=93.7&height=181.3"}),
    ("YAML", {"yaml": "weight_kg: 93.7\nage: 47\n"}),
    ("JSON in a string", {"payload": '{"weight_kg": 93.7, "age": 47}'}),
    (
        "JSON in a string, nested strings",
        {"body": '{"vitals": {"weight": "93.7 kg", "alt": "38 U/L"}}'},
    ),
    ("JSON array in a string", {"series": "[93.7, 181.3]"}),
    ("CSV", {"csv": "age,weight_kg,height_cm\n47,93.7,181.3\n"}),
    ("CSV semicolons, decimal commas", {"csv": "Alter;Gewicht;Groesse\n47;93,7;181,3"}),
    ("CSV without spaces in a line", {"row": "47,38,117"}),
    ("markdown table", {"md": "| age | weight |\n|---|---|\n| 47 | 93.7 |"}),
    ("SQL INSERT", {"sql": "INSERT INTO vitals (age, weight_kg) VALUES (47, 93.7)"}),
    (
        "SQL INSERT, several rows",
        {"sql": "INSERT INTO labs (alt, ast, plt) VALUES (38, 29, 263), (40, 30, 250);"},
    ),
    ("SQL INSERT without columns", {"sql": "insert into t values ('P-1', 93.7, 181.3)"}),
    ("SQL UPDATE", {"sql": "UPDATE patients SET weight_kg = 93.7 WHERE id = 7"}),
    # -- keys -----------------------------------------------------------------------------------
    ("number as an object key", {"weights_by_value": {"93.7": "2026-11-03"}}),
    ("number with unit as a key", {"history": {"93.7 kg": "start"}}),
]


def send_through_proxy(args: dict[str, Any]) -> tuple[list[dict[str, Any]], RewriteLog]:
    calls: list[dict[str, Any]] = []
    log = RewriteLog(None, summary=None)

    async def main() -> None:
        upstreams = [Upstream("store", server=recording_server(calls))]
        noise = _NoiseBox(source())
        async with (
            Proxy(upstreams, noise.use, rewrite_log=log) as proxy,
            Client(proxy.server) as agent,
        ):
            result = await agent.call_tool("record", args)
            assert result.content[0].text == "stored"

    anyio.run(main)
    return calls, log


class _NoiseBox:
    """The proxy's noise factory over one in-memory CachedNoise (no record file)."""

    def __init__(self, noise: CachedNoise) -> None:
        self.noise = noise

    def use(self, reason: str) -> Any:
        return contextlib.nullcontext(self.noise)


@pytest.mark.parametrize(("label", "args"), SHAPES, ids=[s[0] for s in SHAPES])
def test_no_true_value_reaches_a_recording_upstream(label, args):
    """Every shape, through the proxy to an upstream that records what it got: no true value."""
    assert leaked(args), "the row must write a true value"
    calls, log = send_through_proxy(args)
    assert len(calls) == 1
    assert leaked(calls[0]) == [], f"{label}: {calls[0]}"
    assert set(calls[0]) == set(args), "the same arguments, rewritten"
    assert log.entries and log.entries[0]["replaced"], "the rewrite is logged"
    assert leaked(log.entries) == [], "the log holds a true value"


def test_the_matrix_is_the_issue_s_size():
    """About 57 shapes, as in the audit that found 20 of them leaking."""
    assert len(SHAPES) >= 57


def rewrite(args: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
    out, _ = Rewriter(PROFILE, strict=strict).rewrite(args, {}, source())
    return out


W = NOISY["weight_kg"]


def test_what_is_not_the_persons_stays_as_written():
    """Ranges keep their other end, structures stay parseable, dates and ids are untouched."""
    out = rewrite({"note": "weight 93.7-95 kg on 2026-11-03 at 10:47, id P-004217"})
    assert out["note"] == f"weight {W:.1f}-95 kg on 2026-11-03 at 10:47, id P-004217"
    out = rewrite({"note": "weight between 93.7 and 95 kg"})
    assert out["note"] == f"weight between {W:.1f} and 95 kg"
    assert rewrite({"weight": "93,7 kg"})["weight"] == f"{W:.1f} kg".replace(".", ",")
    assert rewrite({"weight": "9.37e1 kg"})["weight"] == f"{W / 10:.2f}e1 kg"
    plt = rewrite({"platelet_count": "263,000/uL"})["platelet_count"]
    assert re.fullmatch(r"\d{3},\d{3}/uL", plt) and plt != "263,000/uL"
    assert int(plt[:3]) == round(NOISY["platelets"])
    grams = rewrite({"weight_g": 93700})["weight_g"]
    assert isinstance(grams, int) and abs(grams - W * 1000) < 1
    assert rewrite({"age_months": 564})["age_months"] == round(NOISY["age"] * 12)
    payload = json.loads(rewrite({"payload": '{"weight_kg": 93.7, "age": 47}'})["payload"])
    assert payload == {"weight_kg": round(W, 1), "age": round(NOISY["age"])}
    rows = list(csv.reader(io.StringIO(rewrite({"csv": "age,weight_kg\n47,93.7\n"})["csv"])))
    assert rows == [["age", "weight_kg"], [str(round(NOISY["age"])), f"{W:.1f}"]]
    sql = rewrite({"sql": "INSERT INTO vitals (age, weight_kg) VALUES (47, 93.7)"})["sql"]
    assert sql == f"INSERT INTO vitals (age, weight_kg) VALUES ({round(NOISY['age'])}, {W:.1f})"
    assert rewrite({"query": "weight_kg=93.7&visit=3"})["query"] == f"weight_kg={W:.1f}&visit=3"


@pytest.mark.parametrize(
    "args",
    [
        {"note": "Visit on 2026-11-03 at 10:47; call +1 555 0100.", "count": 3},
        {"csv": "visit,count\n1,3\n2,5\n"},
        {"sql": "SELECT * FROM visits WHERE id = 7 LIMIT 20"},
        {"payload": '{"page": 2, "size": 50}'},
        {"ranges": "dose 2-3 tablets, 10 to 20 minutes"},
        {"ids": {"1001": "a", "1002": "b"}},
        {"codes": "user47, vitamin B12, COVID19"},
    ],
)
def test_other_numbers_in_structures_pass_unchanged(args):
    """Numbers that are not the person's, in text, CSV, SQL, JSON strings and keys, stay."""
    out, log = Rewriter(PROFILE).rewrite(args, {}, source())
    assert out == args and log == []


def test_strict_refuses_keys_that_would_collide():
    """Two keys that would both become the noisy value: refused, not merged."""
    with pytest.raises(ArgumentRefused, match="key"):
        rewrite({"by_weight": {"93.7": "a", f"{W:.1f}": "b"}})


def test_strict_refuses_an_ambiguous_number_in_text():
    """A number in text equal to two declared values, with no context to tell them apart."""
    truth = {**TRUTH, "hdl": 47}
    noise = CachedNoise(api.DEFAULT_PROFILE, truth, seeded_state(truth, seed=6))
    with pytest.raises(ArgumentRefused, match="age and hdl") as refused:
        Rewriter(noise.profile).rewrite({"row": "P-1,47,x"}, {}, noise)
    assert "47" not in str(refused.value)
    out, _ = Rewriter(noise.profile).rewrite({"row": "age=47, hdl=47"}, {}, noise)
    assert "47" not in out["row"]


def test_not_strict_still_reads_context_but_not_bare_numbers():
    """--not-strict: ranges, formats and structures with names are rewritten; bare ones stay."""
    out = rewrite(
        {"a": "weight 93.7-95 kg", "b": "93,7 kg", "c": "weight_kg=93.7", "d": "w=93.7"},
        strict=False,
    )
    assert leaked({k: out[k] for k in "abc"}) == [] and out["d"] == "w=93.7"


def test_a_refused_call_is_not_forwarded(tmp_path):
    """Through the proxy: an MCP error, the upstream receives nothing, the log says why."""
    calls: list[dict[str, Any]] = []
    store = make_record(tmp_path / "rg.json")
    log = RewriteLog(None, summary=None)

    async def main() -> None:
        upstreams = [Upstream("store", server=recording_server(calls))]
        async with (
            Proxy(upstreams, Guard(store).noise, rewrite_log=log) as proxy,
            Client(proxy.server) as agent,
        ):
            with pytest.raises(MCPError) as refused:
                await agent.call_tool("record", {"by_weight": {"93.7": "a", f"{W:.1f}": "b"}})
            assert "did not forward 'record'" in refused.value.message
            assert leaked(refused.value.message) == []

    anyio.run(main)
    assert calls == []
    assert [e["tool"] for e in log.entries if "refused" in e] == ["record"], log.entries
    assert leaked(log.entries) == []


# -- another person, another profile: the same rules, not this file's numbers ---------------------

OTHER_PROFILE = {
    "format": "veil.rootguard.profile",
    "version": 1,
    "budget": 6.0,
    "values": {
        "age": {"quantity": "age", "unit": "years", "domain": [18, 100], "precision": 1,
                "privacy_unit": 10, "aliases": ["age", "alter", "edad"]},
        "weight": {"quantity": "mass", "unit": "lb", "domain": [60, 550], "precision": 0.1,
                   "privacy_unit": 20, "aliases": ["weight", "poids", "gewicht"]},
        "ldl": {"quantity": "cholesterol", "unit": "mmol/L", "domain": [0.5, 12],
                "precision": 0.01, "privacy_unit": 0.5, "aliases": ["ldl", "ldl-c"]},
        "hba1c": {"quantity": "percent", "unit": "%", "domain": [3, 20], "precision": 0.1,
                  "privacy_unit": 1, "aliases": ["hba1c", "a1c"]},
    },
}  # fmt: skip
OTHER_TRUTH = {"age": 63, "weight": 181.6, "ldl": 3.42, "hba1c": 6.8}


def other_shapes(w: float, kg: float, age: int, ldl: float, mgdl: float) -> list[dict[str, Any]]:
    """Shapes written from the values, so that they hold whatever the person's values are."""
    comma = f"{kg:.1f}".replace(".", ",")
    return [
        {"poids": f"{comma} kg"},
        {"note": f"weight between {w:.1f} and {w + 5:.1f} lb"},
        {"note": f"LDL {ldl - 0.4:.2f}\u2013{ldl:.2f} mmol/L"},
        {"note": f"edad {age}, gewicht {comma} kg"},
        {"weight_g": round(kg * 1000)},
        {"age_months": age * 12},
        {"ldl_mg_dl": round(mgdl)},
        {"query": f"a={age}&w={w:.1f}"},
        {"payload": json.dumps({"ldl": ldl, "weight": f"{w:.1f} lb"})},
        {"csv": f"alter;gewicht\n{age};{str(round(w, 1)).replace('.', ',')}"},
        {"sql": f"INSERT INTO p (age, weight) VALUES ({age}, {w:.1f})"},
        {"by": {f"{w:.1f}": "start"}},
        {"note": f"HbA1c {OTHER_TRUTH['hba1c']}% and {f'{w / 100:.4f}'.rstrip('0')}e2 lb"},
        {"sci": f"{ldl / 10:.3f}e1 mmol/L"},
    ]


def test_another_profile_and_person():
    """A profile in pounds and mmol/L with other aliases: every shape of its values is rewritten."""
    profile = load_profile(dict(OTHER_PROFILE))
    cache = RootCache.empty(profile)
    cache.draw(OTHER_TRUTH, random.Random(17))  # a test's seeded draw, not real data
    noise = CachedNoise(OTHER_PROFILE, OTHER_TRUTH, cache.to_dict())
    for name, true in OTHER_TRUTH.items():  # far enough apart to tell noisy from true
        assert abs(noise.noisy(name) - true) > profile.roots[name].privacy_unit / 4, name
    kg = OTHER_TRUTH["weight"] * 0.45359237
    mgdl = OTHER_TRUTH["ldl"] * 38.67
    shapes = other_shapes(OTHER_TRUTH["weight"], kg, OTHER_TRUTH["age"], OTHER_TRUTH["ldl"], mgdl)
    rewriter = Rewriter(profile)
    for args in shapes:
        assert true_values_written(args, profile, OTHER_TRUTH), args
        out, _ = rewriter.rewrite(args, {}, noise)
        assert true_values_written(out, profile, OTHER_TRUTH) == [], (args, out)
