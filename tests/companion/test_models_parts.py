"""A GGUF shipped in part wheels is joined once, in order, and only with the pinned SHA-256."""

from __future__ import annotations

import hashlib
import sys

import pytest

import companion.models as models
from py_core.errors import InvalidParameterError


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Three importable 'part wheels' (packages with data/partNN.bin) and a home."""
    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(50)), bytes(range(200, 256)) * 3, b"tail"]
    for i, chunk in enumerate(chunks, start=1):
        pkg = site / f"veil_test_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    for i in range(1, 4):
        sys.modules.pop(f"veil_test_part{i}", None)
    monkeypatch.setenv("VEIL_HOME", str(tmp_path / "home"))
    joined = b"".join(chunks)
    return joined


def _spec(joined: bytes, sha: str | None = None) -> models.PartModel:
    return models.PartModel(
        packages=("veil_test_part1", "veil_test_part2", "veil_test_part3"),
        file="joined.gguf",
        size=len(joined),
        sha256=sha or hashlib.sha256(joined).hexdigest(),
        description="test",
    )


def test_the_parts_are_joined_in_order_once(parts, monkeypatch, capsys):
    monkeypatch.setitem(models.PART_MODELS, "test-model", _spec(parts))
    path = models.part_gguf_path("test-model")
    assert path.read_bytes() == parts
    assert "joining test-model from 3 part wheels" in capsys.readouterr().err
    models.part_gguf_path("test-model")  # already there: not joined again
    assert capsys.readouterr().err == ""
    assert any(e.id == "test-model" for e in models.model_catalog())


def test_parts_that_do_not_hash_to_the_pin_are_refused(parts, monkeypatch):
    monkeypatch.setitem(models.PART_MODELS, "test-model", _spec(parts, "0" * 64))
    with pytest.raises(InvalidParameterError, match="not the pinned ones"):
        models.part_gguf_path("test-model")
    assert not list(models.veil_home().rglob("joined.gguf*"))  # nothing kept


def test_a_missing_part_is_named(parts, monkeypatch):
    spec = _spec(parts)
    missing = models.PartModel(
        (*spec.packages, "veil_test_part_absent"), spec.file, spec.size, spec.sha256, ""
    )
    monkeypatch.setitem(models.PART_MODELS, "test-model", missing)
    with pytest.raises(InvalidParameterError, match="veil_test_part_absent"):
        models.part_gguf_path("test-model")
    assert "test-model" not in [e.id for e in models.model_catalog()]


def test_a_large_gguf_keeps_a_bfloat16_copy_that_loads_in_float32(tmp_path):
    """The copy of a >= 400 M parameter GGUF is bfloat16 (half the disk) and reloads."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from companion.audit.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    target = tmp_path / "copy"
    models._save_dequantized(model, tokenizer, target, "bfloat16")
    assert next(model.parameters()).dtype == torch.float32  # the loaded model is unchanged
    with safe_open(str(target / "model.safetensors"), "pt") as saved:
        names = saved.keys()
        assert names and all(saved.get_tensor(k).dtype == torch.bfloat16 for k in names)
    assert models._saved(target)
    again = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert next(again.parameters()).dtype == torch.float32
    assert models.BF16_COPY_PARAMETERS > 268_000_000  # the bundled Gemma keeps float32
