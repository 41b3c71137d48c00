"""No 500 from user input: requests generated from the app's own OpenAPI schema.

Hypothesis draws an operation of ``/openapi.json`` and fills its path, query and
body from the schema -- usually valid values, sometimes any JSON value in a field's
place, sometimes a broken body -- and sends it through the real app (token, Host
and Origin checks included).  Every answer must be below 500, in the error
envelope when it is an error, and free of exception text.  CPU-light: a tiny
random chat model with a 16-token answer limit, keyword embeddings, and audit jobs
that are queued but never run.
"""

from __future__ import annotations

import json
import string
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.app import create_app
from companion.settings import Settings

BASE = "http://127.0.0.1:8765"
EXAMPLES = 300
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
INTERNALS = ("Traceback", 'File "', "RecursionError", "ZeroDivisionError", "KeyError",
             "AttributeError", "IndexError", "TypeError:", "ValueError:")  # fmt: skip
SUFFIXES = (".txt", ".md", ".html", ".eml", ".pdf", ".npy", ".pt", ".safetensors", ".exe", "")


class KeywordEmbedder:
    def encode(self, texts, **kwargs):
        out = np.zeros((len(texts), 5), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i, len(text) % 4] = 1.0
            out[i, 4] = 0.01
        return out


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory):
    """The app over a tiny chat model; audit jobs are accepted into a queue that never runs."""
    from transformers import AutoTokenizer

    from companion.audit.jobs import JobManager
    from companion.audit.service import ModelPool
    from companion.audit.tiny import make_tiny_model
    from companion.models import load_causal_lm
    from tests.companion.audit_support import opener_for

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    loaded = load_causal_lm(str(folder), device="cpu")
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("VEIL_HOME", str(home))
    jobs = JobManager(
        pool=ModelPool(opener=opener_for(loaded)),
        max_queued=4,
        max_running=0,  # queued, never started: the fuzz stays CPU-light
    )
    config = Settings(
        home=home, model=str(folder), preload_model=False, max_tokens_limit=16,
        default_max_tokens=4, max_upload_bytes=200_000, allow_seed=True,
    )  # fmt: skip
    app = create_app(config, embedder=KeywordEmbedder(), audit_jobs=jobs)
    app.state.engine.loaded = loaded
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        ingest = [("files", ("seed.txt", b"gout and asthma notes. " * 20, "text/plain"))]
        assert client.post("/v1/documents", files=ingest, data={"collection": "c1"}).is_success
        yield app, client, app.openapi()
    jobs.shutdown()
    mp.undo()
    torch.set_num_threads(before)


# -- values from a JSON schema ------------------------------------------------------------

JSON_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"].get(name) or spec.get("$defs", {})[name]
    return schema


def values(schema: dict[str, Any], spec: dict[str, Any], depth: int = 0) -> st.SearchStrategy:
    """Mostly values the schema allows; now and then any JSON value (a wrong type)."""
    schema = _resolve(schema, spec)
    if depth > 4:
        return JSON_ANY
    return st.one_of(_valid(schema, spec, depth), JSON_ANY) if depth else _valid(schema, spec, 0)


def _valid(schema: dict[str, Any], spec: dict[str, Any], depth: int) -> st.SearchStrategy:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([values(s, spec, depth + 1) for s in schema[key]])
    if "allOf" in schema:
        return values(schema["allOf"][0], spec, depth + 1)
    kind = schema.get("type")
    if kind == "string":
        if schema.get("format") == "binary":
            return st.binary(max_size=2000)
        top = min(schema.get("maxLength", 60), 60)
        return st.text(min_size=min(schema.get("minLength", 0), top), max_size=top)
    if kind == "integer":
        low, high = schema.get("minimum", -(2**40)), schema.get("maximum", 2**40)
        return st.integers(min_value=low, max_value=high) | st.integers()
    if kind == "number":
        bounded = st.floats(
            min_value=schema.get("minimum"),
            max_value=schema.get("maximum"),
            allow_nan=False,
            allow_infinity=False,
        )
        return bounded | st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = values(schema.get("items", {}), spec, depth + 1)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=4)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        fields = {
            name: values(sub, spec, depth + 1) for name, sub in props.items() if name in required
        }
        optional = {
            name: values(sub, spec, depth + 1)
            for name, sub in props.items()
            if name not in required
        }
        return st.fixed_dictionaries(fields, optional=optional)
    return JSON_ANY


# -- requests -----------------------------------------------------------------------------


def _latin1(value: Any) -> str:
    """Bytes drawn for a binary field, as text where the body is JSON."""
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, methods in sorted(spec["paths"].items())
        for method, op in sorted(methods.items())
    ]


@st.composite
def requests(draw, spec: dict[str, Any]) -> dict[str, Any]:
    method, template, op = draw(st.sampled_from(_operations(spec)))
    path = template
    query: dict[str, Any] = {}
    for param in op.get("parameters", []):
        value = draw(values(param.get("schema", {}), spec, 1))
        text = value if isinstance(value, str) else json.dumps(value)
        if param["in"] == "path":
            safe = "".join(c for c in text if c in string.ascii_letters + string.digits + "-_.")
            path = path.replace("{" + param["name"] + "}", safe or "0")
        elif param["in"] == "query" and draw(st.booleans()):
            query[param["name"]] = text
    request: dict[str, Any] = {"method": method, "url": path, "params": query}
    content = op.get("requestBody", {}).get("content", {})
    if "multipart/form-data" in content and draw(st.booleans()):
        schema = _resolve(content["multipart/form-data"]["schema"], spec)
        form = draw(values(schema, spec))
        files, data = [], {}
        for name, value in (form if isinstance(form, dict) else {}).items():
            if isinstance(value, bytes | list):
                blobs = value if isinstance(value, list) else [value]
                for blob in blobs:
                    suffix = draw(st.sampled_from(SUFFIXES))
                    raw = blob if isinstance(blob, bytes) else json.dumps(blob).encode()
                    files.append((name, (f"f{suffix}", raw, "application/octet-stream")))
            elif value is not None:
                data[name] = value if isinstance(value, str) else json.dumps(value)
        request.update(files=files or None, data=data or None)
    elif "application/json" in content:
        schema = content["application/json"]["schema"]
        shape = draw(st.sampled_from(["schema", "schema", "schema", "any", "broken"]))
        if shape == "broken":
            request["content"] = draw(st.binary(max_size=200))
            request["headers"] = {"Content-Type": "application/json"}
        else:
            body = draw(values(schema, spec) if shape == "schema" else JSON_ANY)
            request["content"] = json.dumps(body, default=_latin1).encode()
            request["headers"] = {"Content-Type": "application/json"}
    return request


def test_the_fuzz_cases_cover_every_operation(fuzz_app):
    """The generator knows every operation of the schema (and the schema has a few)."""
    _, _, spec = fuzz_app
    assert len(_operations(spec)) >= 20


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same cases in every run (CI); change the seed to explore
)
@given(data=st.data())
def test_no_input_from_the_schema_gives_a_500(fuzz_app, data):
    """Any request built from /openapi.json is answered below 500, without internals."""
    _, client, spec = fuzz_app
    request = data.draw(requests(spec))
    response = client.request(**request)
    summary = (
        f"{request['method']} {request['url']} -> {response.status_code}: {response.text[:300]}"
    )
    assert response.status_code < 500, summary
    text = response.text[:5000]
    for needle in INTERNALS:
        assert needle not in text, summary
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"} and body["error"]["code"], summary
