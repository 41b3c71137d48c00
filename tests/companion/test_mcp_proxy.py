"""veil mcp proxy: a table of argument shapes where no declared true value is forwarded, and
the proxy over stdio and HTTP with the SDK's client (upstreams over stdio and HTTP, results
unchanged, errors and timeouts as MCP errors, the rewrite log without true values)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, REQUEST_TIMEOUT
from starlette.applications import Starlette

from companion.mcp.guard import CachedNoise, Guard
from companion.mcp.proxy import Proxy, RewriteLog, Upstream, load_config
from companion.mcp.rewrite import ArgumentRefused, Rewriter
from evals.rootguard.services import Recorder, build_service
from py_core.errors import InvalidParameterError
from py_core.rootguard import api
from py_core.rootguard.profile import load_profile
from py_core.rootguard.units import QUANTITIES, convert
from tests.companion.fakes import free_port, serve_http
from tests.companion.test_mcp import TRUTH, leaks, make_record, seeded_state

ROOT = Path(__file__).resolve().parents[2]
STATE = seeded_state(TRUTH)
NOISY = api.noisy_values(api.DEFAULT_PROFILE, STATE)


def source() -> CachedNoise:
    return CachedNoise(api.DEFAULT_PROFILE, TRUTH, STATE)


def lb(kg: float) -> float:
    return convert(kg, "mass", "kg", "lb")


PROFILE = load_profile(dict(api.DEFAULT_PROFILE))
TRUE_ALL = PROFILE.evaluate_all(TRUTH)


def true_values_in(value: Any) -> list[str]:
    """Every number in ``value`` (JSON numbers and numbers in strings) that writes a true value:
    a root in any unit of its quantity, or the true BMI, at the number's written precision."""
    found = []
    for written in re.findall(r"(?<![\w.^])\d+(?:\.\d+)?", json.dumps(value)):
        number, decimals = float(written), len(written.partition(".")[2])
        for name, truth in TRUE_ALL.items():
            if name not in TRUTH and name != "bmi":
                continue
            spec = PROFILE.spec(name)
            for unit in QUANTITIES[spec.quantity].factors:
                tol = 0.5 * 10.0**-decimals
                if tol > 0.05 * abs(convert(truth, spec.quantity, spec.unit, unit)):
                    continue  # too coarse to say anything ("2" metres)
                if name in PROFILE.roots:
                    tol += 0.5 * convert(
                        PROFILE.roots[name].grid.step, spec.quantity, spec.unit, unit
                    )
                if abs(convert(truth, spec.quantity, spec.unit, unit) - number) < tol - 1e-9:
                    found.append(f"{written} = {name} in {unit}")
    return found


#: (label, schema, arguments, {JSON path: expected value sent}) -- every row holds true values.
W, H = NOISY["weight_kg"], NOISY["height_cm"]
SHAPES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("flat number", {}, {"weight_kg": 93.7}, {"weight_kg": round(W, 1)}),
    ("integer field", {}, {"age": 47}, {"age": round(NOISY["age"])}),
    ("camelCase", {}, {"bodyWeightKg": 93.7}, {"bodyWeightKg": round(W, 1)}),
    (
        "nested objects",
        {},
        {"patient": {"vitals": {"weight": 93.7, "height": {"value": 181.3, "unit": "cm"}}}},
        {"patient.vitals.weight": round(W, 1), "patient.vitals.height.value": round(H, 1)},
    ),
    ("array of numbers", {}, {"weights": [93.7, 93.7]}, {"weights.0": round(W, 1)}),
    (
        "array of name/value pairs",
        {},
        {"results": [{"name": "Fasting glucose", "value": 117}, {"test": "ALT", "value": "38"}]},
        {"results.0.value": round(NOISY["glucose"]), "results.1.value": f"{NOISY['alt']:.0f}"},
    ),
    ("string with unit", {}, {"weight": "93.7 kg"}, {"weight": f"{W:.1f} kg"}),
    ("string in another unit", {}, {"weight": "206.6 lb"}, {"weight": f"{lb(W):.1f} lb"}),
    ("unit in the field name", {}, {"weight_lb": 206.6}, {"weight_lb": round(lb(W), 1)}),
    ("unit in a sibling", {}, {"w": {"name": "weight", "value": 206.6, "unit": "lbs"}}, {}),
    ("number as a string", {}, {"weight_kg": "93.7"}, {"weight_kg": f"{W:.1f}"}),
    ("number as a string, unnamed field", {}, {"x": "93.7"}, {"x": f"{W:.1f}"}),
    ("number, unnamed field", {}, {"reading": 263}, {"reading": round(NOISY["platelets"])}),
    (
        "described field",
        {"properties": {"x1": {"type": "number", "description": "Patient weight in kilograms"}}},
        {"x1": 93.7},
        {"x1": round(W, 1)},
    ),
    (
        "free text",
        {},
        {"note": "I'm 47, I weigh 93.7 kg and I am 181.3 cm tall; ALT 38 U/L, platelets 263."},
        {},
    ),
    ("age phrase", {}, {"summary": "47-year-old man, glucose 117 mg/dL"}, {}),
    ("derived value", {}, {"bmi": 28.5}, {"bmi": round(NOISY["bmi"], 1)}),
    (
        "deep mix",
        {},
        {"a": [{"b": {"c": [{"label": "Platelet count", "value": "263", "unit": "10^9/L"}]}}]},
        {"a.0.b.c.0.value": f"{NOISY['platelets']:.0f}"},
    ),
]


def at(value: Any, path: str) -> Any:
    for part in path.split("."):
        value = value[int(part)] if part.isdigit() else value[part]
    return value


@pytest.mark.parametrize(
    ("label", "schema", "args", "expected"), SHAPES, ids=[s[0] for s in SHAPES]
)
def test_the_proxy_never_forwards_a_declared_true_value(label, schema, args, expected):
    """Whatever the shape, no true value is left, and the named paths carry the noisy value."""
    assert true_values_in(args), "the row must hold a true value"
    out, log = Rewriter(source().profile).rewrite(args, schema, source())
    assert true_values_in(out) == [], f"{label}: a true value is forwarded: {out}"
    for path, value in expected.items():
        assert at(out, path) == value, (path, at(out, path), value)
    assert log and all(set(r.to_dict()) == {"path", "name", "how", "sent"} for r in log)
    assert true_values_in([r.to_dict() for r in log]) == [], "the log holds a true value"


@pytest.mark.parametrize(
    "args",
    [
        {"count": 3, "date": "2024-05-12", "id": "P-004217", "dose": "2 tablets"},
        {"font": {"height": 12}, "weight_goal_note": "lose some weight"},
        {"age_group": "adult", "visits": [1, 2, 3]},
    ],
)
def test_other_numbers_pass_unchanged(args):
    """Numbers that are not the person's values (and a root's field outside its domain) stay."""
    out, log = Rewriter(source().profile).rewrite(args, {}, source())
    assert out == args and log == []


def test_ambiguous_number_is_refused_not_guessed():
    """A bare number equal to two declared values is not forwarded."""
    truth = {**TRUTH, "hdl": 47}
    noise = CachedNoise(api.DEFAULT_PROFILE, truth, seeded_state(truth, seed=6))
    with pytest.raises(ArgumentRefused, match="age and hdl"):
        Rewriter(noise.profile).rewrite({"n": 47}, {}, noise)
    out, _ = Rewriter(noise.profile).rewrite({"age": 47, "hdl_c": 47}, {}, noise)
    assert leaks(json.dumps(out)) == []


def test_not_strict_leaves_unnamed_fields():
    """With strict off, a number in a field that names no value is left (the finder still runs)."""
    out, _ = Rewriter(source().profile, strict=False).rewrite({"x": 93.7}, {}, source())
    assert out == {"x": 93.7}


def test_config_is_validated_with_every_problem():
    """Unknown keys, neither command nor url, a bad timeout: one error listing each."""
    with pytest.raises(InvalidParameterError) as info:
        load_config(
            {"mcpServers": {"a": {"cmd": "x"}, "b": {}, "c": {"url": "http://x", "timeout_s": -1}}}
        )
    text = str(info.value)
    assert "unknown keys" in text and "exactly one of" in text and "timeout_s" in text
    assert [u.name for u in load_config({"upstreams": {"a": {"command": "x"}}})] == ["a"]


# -- the proxy with the SDK client ---------------------------------------------------------------


def flaky_server() -> MCPServer:
    server: MCPServer = MCPServer("flaky", log_level="WARNING")

    @server.tool()
    async def slow(weight_kg: float) -> str:
        """Never answers in time."""
        await anyio.sleep(30)
        return "late"

    @server.tool()
    def broken(weight_kg: float) -> str:
        """Always fails."""
        raise ToolError("the upstream's own failure")

    @server.tool()
    def echo(payload: dict[str, Any]) -> dict[str, Any]:
        """Answers with what it got."""
        return {"got": payload, "extra": [1, 2.5, "x"]}

    return server


def test_proxy_in_process_results_errors_and_timeouts(tmp_path):
    """Results come back unchanged; upstream errors, timeouts and unknown tools are MCP errors."""
    store = make_record(tmp_path / "rg.json")
    log = RewriteLog(None, summary=None)
    upstreams = [
        Upstream("flaky", server=flaky_server(), timeout_s=0.5),
        Upstream("clinic", server=build_service("clinic", recorder := Recorder())),
        Upstream("down", command=str(tmp_path / "no-such-server"), timeout_s=5),
    ]

    async def main() -> None:
        async with Proxy(upstreams, Guard(store).noise, rewrite_log=log) as proxy:
            assert "down" in proxy.down
            async with Client(proxy.server) as agent:
                names = {t.name for t in (await agent.list_tools()).tools}
                assert {"flaky__slow", "flaky__echo", "clinic__record_vitals"} <= names
                echoed = await agent.call_tool("flaky__echo", {"payload": {"weight_kg": 93.7}})
                direct = await Client(flaky_server()).__aenter__()
                try:
                    expected = await direct.call_tool(
                        "echo", {"payload": {"weight_kg": round(NOISY["weight_kg"], 1)}}
                    )
                finally:
                    await direct.__aexit__(None, None, None)
                assert [c.model_dump() for c in echoed.content] == [
                    c.model_dump() for c in expected.content
                ]
                assert echoed.structured_content == expected.structured_content
                broken = await agent.call_tool("flaky__broken", {"weight_kg": 93.7})
                assert broken.is_error and "the upstream's own failure" in broken.content[0].text
                with pytest.raises(MCPError) as slow:
                    await agent.call_tool("flaky__slow", {"weight_kg": 93.7})
                assert slow.value.code == REQUEST_TIMEOUT
                assert "'flaky' did not answer 'slow' within 0.5 s" in slow.value.message
                with pytest.raises(MCPError, match="'down' is unavailable"):
                    await agent.call_tool("down__anything", {})
                with pytest.raises(MCPError) as unknown:
                    await agent.call_tool("nowhere__tool", {})
                assert unknown.value.code == INVALID_PARAMS
                await agent.call_tool(
                    "clinic__record_vitals",
                    {"patient_id": "P1", "visit_number": 2, "measurements": {"weight_kg": 93.7}},
                )

    anyio.run(main)
    sent = json.dumps(recorder.calls)
    assert true_values_in(recorder.calls) == [] and f"{round(NOISY['weight_kg'], 1)}" in sent
    assert leaks(json.dumps(log.entries)) == []
    assert any(e["replaced"] for e in log.entries)


def test_a_call_that_cannot_be_sanitized_is_not_forwarded(tmp_path):
    """An ambiguous declared value: an MCP error naming the values, and the upstream gets nothing."""
    truth = {**TRUTH, "hdl": 47}
    store = make_record(tmp_path / "rg.json", truth, seeded_state(truth, seed=6))
    recorder = Recorder()
    upstreams = [Upstream("calculator", server=build_service("calculator", recorder))]

    async def main() -> None:
        async with Proxy(upstreams, Guard(store).noise) as proxy, Client(proxy.server) as agent:
            with pytest.raises(MCPError) as refused:
                await agent.call_tool(
                    "compute_score", {"score": "bmi", "inputs": {"x": 47}, "female": 0}
                )
            assert refused.value.code == INVALID_PARAMS
            assert "did not forward 'compute_score'" in refused.value.message
            assert "age and hdl" in refused.value.message

    anyio.run(main)
    assert recorder.calls == []


@contextlib.contextmanager
def http_upstream(name: str, recorder: Recorder) -> Any:
    server = build_service(name, recorder)
    sub = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with server.session_manager.run():
            yield

    app = Starlette(routes=sub.routes, lifespan=lifespan)
    with serve_http(app, free_port()) as url:
        yield f"{url}/mcp"


def test_proxy_over_stdio_with_stdio_and_http_upstreams(tmp_path):
    """`veil mcp proxy` on stdio (SDK client) in front of a stdio and an HTTP upstream."""
    store = make_record(tmp_path / "rg.json")
    clinic_log = tmp_path / "clinic.jsonl"
    labs = Recorder()
    with http_upstream("labs", labs) as labs_url:
        config = {
            "timeout_s": 30,
            "upstreams": {
                "clinic": {
                    "command": sys.executable,
                    "args": [
                        "-m",
                        "evals.rootguard.services",
                        "clinic",
                        "--record",
                        str(clinic_log),
                    ],
                    "cwd": str(ROOT),
                },
                "labs": {"url": labs_url, "headers": {"X-Test": "1"}},
            },
        }
        (tmp_path / "proxy.json").write_text(json.dumps(config))
        rewrite_log = tmp_path / "proxy.log"
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "companion", "mcp", "proxy", "--config", str(tmp_path / "proxy.json"),
                  "--record", str(store.path), "--log", str(rewrite_log)],
            cwd=str(ROOT),
        )  # fmt: skip

        async def main() -> None:
            async with Client(params, read_timeout_seconds=60) as agent:
                names = {t.name for t in (await agent.list_tools()).tools}
                assert names == {"clinic__record_vitals", "labs__submit_results"}
                vitals = await agent.call_tool(
                    "clinic__record_vitals",
                    {
                        "patient_id": "P-004217",
                        "visit_number": 3,
                        "measurements": {"weight_kg": 93.7, "height_cm": 181.3, "age_years": 47},
                    },
                )
                assert vitals.content[0].text == "recorded 3 measurements for visit 3"
                results = await agent.call_tool(
                    "labs__submit_results",
                    {
                        "patient_id": "P-004217",
                        "collected_on": "2026-11-03",
                        "results": [
                            {"test": "Fasting glucose", "value": "6.49", "unit": "mmol/L"},
                            {"test": "ALT (SGPT)", "value": "38", "unit": "U/L"},
                            {"test": "Platelet count", "value": "263", "unit": "10^9/L"},
                        ],
                    },
                )
                assert results.content[0].text == "stored 3 results"

        anyio.run(main)
    clinic = [json.loads(line) for line in clinic_log.read_text().splitlines()]
    assert clinic[0]["arguments"]["measurements"] == {
        "weight_kg": round(NOISY["weight_kg"], 1),
        "height_cm": round(NOISY["height_cm"], 1),
        "age_years": round(NOISY["age"], 1),
    }
    assert clinic[0]["arguments"]["visit_number"] == 3
    got = labs.calls[0][2]
    assert got["collected_on"] == "2026-11-03" and true_values_in(got) == []
    glucose = float(got["results"][0]["value"])
    assert glucose == pytest.approx(
        convert(NOISY["glucose"], "glucose", "mg/dL", "mmol/L"), abs=0.006
    )
    assert "6.49" not in json.dumps(got)  # 117 mg/dL written in mmol/L
    entries = [json.loads(line) for line in rewrite_log.read_text().splitlines()]
    assert {e["upstream"] for e in entries} == {"clinic", "labs"}
    assert leaks(rewrite_log.read_text()) == [] and "6.49" not in rewrite_log.read_text()
