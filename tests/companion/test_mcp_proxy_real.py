"""veil mcp proxy in front of real MCP servers -- `@modelcontextprotocol/server-memory` (npm)
and `mcp-server-sqlite` (PyPI, in its own virtual environment: it needs mcp<2) -- and what
they stored afterwards (the memory server's JSON-lines file, the SQLite table): no true value,
in any format; the noisy values where the true ones were."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from py_core.rootguard import api
from py_core.rootguard.profile import load_profile
from tests.companion.mcp_leaks import true_values_written
from tests.companion.test_mcp import TRUTH, make_record, seeded_state

ROOT = Path(__file__).resolve().parents[2]
MEMORY_SERVER = ROOT / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist"
# scripts/setup.sh --test creates it; the fixture creates it when it is missing.
SQLITE_VENV = Path(os.environ.get("VEIL_MCP_SQLITE_VENV", ROOT / ".veil-cache" / "mcp-sqlite"))
SQLITE_PACKAGES = ("mcp-server-sqlite==2025.4.25", "mcp<2")
PROFILE = load_profile(dict(api.DEFAULT_PROFILE))
NOISY = api.noisy_values(api.DEFAULT_PROFILE, seeded_state(TRUTH))


def leaked(value: Any) -> list[str]:
    return true_values_written(value, PROFILE, TRUTH)


@pytest.fixture(scope="session")
def sqlite_server() -> Path:
    """mcp-server-sqlite in its own venv (created once; skipped only if it cannot be installed)."""
    exe = SQLITE_VENV / "bin" / "mcp-server-sqlite"
    if not exe.exists():
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", "--clear", str(SQLITE_VENV)],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
            subprocess.run(
                [str(SQLITE_VENV / "bin" / "python"), "-m", "pip", "install", "-q",
                 "--disable-pip-version-check", *SQLITE_PACKAGES],
                check=True, capture_output=True, timeout=600,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            pytest.skip(
                f"mcp-server-sqlite could not be installed into {SQLITE_VENV} "
                f"({type(exc).__name__}: {detail.decode(errors='replace')[-300:]})"
            )
    return exe


@pytest.fixture(scope="session")
def memory_server() -> Path:
    entry = MEMORY_SERVER / "index.js"
    node = shutil.which("node")
    if node is None or not entry.exists():
        pytest.fail(f"node and {entry} are needed: run scripts/setup.sh (npm ci)")
    return entry


def run_proxy(tmp_path: Path, upstreams: dict[str, Any], calls: list[tuple[str, dict]]) -> list:
    """`veil mcp proxy` over stdio in front of ``upstreams``; the results of ``calls``."""
    store = make_record(tmp_path / "rg.json")
    (tmp_path / "proxy.json").write_text(json.dumps({"timeout_s": 60, "upstreams": upstreams}))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "companion", "mcp", "proxy", "--config", str(tmp_path / "proxy.json"),
              "--record", str(store.path), "--log", str(tmp_path / "proxy.log")],
        cwd=str(ROOT),
    )  # fmt: skip
    results = []

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as agent:
            names = {t.name for t in (await agent.list_tools()).tools}
            for tool, args in calls:
                assert tool in names, (tool, sorted(names))
                result = await agent.call_tool(tool, args)
                text = "".join(getattr(c, "text", "") for c in result.content)
                assert not result.is_error, text
                results.append(text)

    anyio.run(main)
    assert leaked((tmp_path / "proxy.log").read_text()) == []
    return results


OBSERVATIONS = [
    "is 47 years old",
    "weighs 93.7 kg, 181.3 cm tall",
    "weight range 92\u201393.7 kg over the year",
    "Gewicht 93,7 kg",
    "platelets 263,000/uL; ALT 38 U/L",
    "BMI inputs: w=93.7;h=181.3",
    '{"glucose": 117, "ast": 29}',
]


def test_memory_server_stores_no_true_value(tmp_path, memory_server):
    """The knowledge graph's file holds the noisy values where the agent wrote the true ones."""
    memory_file = tmp_path / "memory.jsonl"
    upstream = {
        "command": "node",
        "args": [str(memory_server)],
        "env": {"MEMORY_FILE_PATH": str(memory_file)},
    }
    entity = {"name": "patient", "entityType": "person", "observations": OBSERVATIONS}
    more = {"entityName": "patient", "contents": ["glucose 117 mg/dL", "mass 9.37e1 kg"]}
    run_proxy(
        tmp_path,
        {"memory": upstream},
        [
            ("create_entities", {"entities": [entity]}),
            ("add_observations", {"observations": [more]}),
        ],
    )
    stored = [json.loads(line) for line in memory_file.read_text().splitlines() if line.strip()]
    observations = [o for entry in stored for o in entry.get("observations", [])]
    assert len(observations) == len(OBSERVATIONS) + 2, stored
    assert leaked(stored) == [], stored
    assert f"{NOISY['weight_kg']:.1f}" in json.dumps(stored)
    assert f"{NOISY['weight_kg']:.1f}".replace(".", ",") in json.dumps(stored)


NAMED_INSERT = (
    "INSERT INTO vitals (patient, age, weight_kg, height_cm, note) VALUES "
    "('P-004217', 47, 93.7, 181.3, 'ALT 38 U/L, platelets 263,000/uL')"
)


def test_sqlite_server_stores_no_true_value(tmp_path, sqlite_server):
    """The SQLite table holds the noisy values, whatever the SQL (columns named or not)."""
    db = tmp_path / "vitals.sqlite"
    create = (
        "CREATE TABLE vitals (patient TEXT, age INTEGER, weight_kg REAL, height_cm REAL, note TEXT)"
    )
    run_proxy(
        tmp_path,
        {"sqlite": {"command": str(sqlite_server), "args": ["--db-path", str(db)]}},
        [
            ("create_table", {"query": create}),
            ("write_query", {"query": NAMED_INSERT}),
            (
                "write_query",
                {"query": "INSERT INTO vitals VALUES ('P-2', 47, 93.7, 181.3, 'w=93.7;h=181.3')"},
            ),
            ("write_query", {"query": "UPDATE vitals SET weight_kg = 93.7 WHERE patient = 'P-2'"}),
        ],
    )
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT patient, age, weight_kg, height_cm, note FROM vitals"
        ).fetchall()
    assert [r[0] for r in rows] == ["P-004217", "P-2"], rows
    assert leaked([list(r) for r in rows]) == [], rows
    for _patient, age, weight, height, _note in rows:
        assert age == round(NOISY["age"])
        assert weight == pytest.approx(round(NOISY["weight_kg"], 1))
        assert height == pytest.approx(round(NOISY["height_cm"], 1))
