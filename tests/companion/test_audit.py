"""Hidden-state inversion on tiny random models: both paths, proofs, failures, inputs, setup."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from companion.audit.hidden import TargetModel
from companion.audit.inputs import load_states_bytes, load_states_file, save_states, validate_states
from companion.audit.invert import GradientConfig, invert_fast, invert_gradient
from companion.audit.ranker import (
    SetupArtifacts,
    SetupConfig,
    is_ready,
    load_setup,
    run_setup,
    setup_dir,
)
from companion.audit.service import InversionRequest, prepare_states, run_inversion
from companion.audit.tiny import make_tiny_model
from companion.models import load_causal_lm
from py_core.errors import InvalidParameterError, StateError
from tests.companion.audit_support import one_torch_thread  # noqa: F401 (autouse)

# The first setup's pipeline (generated text, full softmax, the table) at a tiny size: the
# resumption and invalidation tests below follow its stages; the quick default has its own
# tests (tests/companion/test_audit_models.py).
SMALL = SetupConfig.thorough(sequences=64, length=20, generation_batch=32, epochs=3, hidden=96)
TEXT = "Alice Smith, 1984, Sydney."


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tiny(request, tmp_path_factory):
    """A tiny random model (both architectures) with its setup, under a private VEIL_HOME."""
    home = tmp_path_factory.mktemp("veil-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("VEIL_HOME", str(home))
    torch.manual_seed(0)
    folder = make_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param)
    target = TargetModel(load_causal_lm(str(folder), device="cpu"))
    artifacts = run_setup(target, SMALL)
    yield target, artifacts, folder
    mp.undo()


def test_fast_path_recovers_and_proves_every_token(tiny):
    """The fast path returns the exact tokens, each proven at float precision."""
    target, artifacts, _ = tiny
    ids = target.encode(TEXT)
    result = invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids)
    assert result.token_ids == ids
    assert result.exact_match and result.token_accuracy == 1.0
    assert result.proven and result.flagged_positions == []
    assert all(p.status == "proven" and p.max_abs <= 1e-3 for p in result.positions)
    assert result.cumulative_loss < 1e-8
    assert result.text == target.decode(ids)


def test_candidate_orders_are_permutations_of_the_vocabulary(tiny):
    """Every position's candidate order lists each token exactly once (exhaustive fallback)."""
    target, artifacts, _ = tiny
    states = target.hidden_states(target.encode(TEXT))
    orders = artifacts.rank(target, states)
    assert len(orders) == states.shape[0]
    for order in orders:
        assert torch.equal(torch.sort(order).values, torch.arange(target.vocab_size))


def test_fast_path_does_not_need_the_text(tiny):
    """Inverting states without ground truth gives the same tokens (truth is only for scoring)."""
    target, artifacts, _ = tiny
    ids = target.encode("5 mg twice a day")
    result = invert_fast(target, target.hidden_states(ids), artifacts)
    assert result.token_ids == ids
    assert result.exact_match is None and result.token_accuracy is None


def test_random_tokens_are_recovered(tiny):
    """Unfamiliar input (uniformly random token ids) is still recovered exactly."""
    target, artifacts, _ = tiny
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(1, target.vocab_size, (8,), generator=gen).tolist()
    result = invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids)
    assert result.exact_match and result.proven


def test_gradient_path_recovers_short_input(tiny):
    """The published algorithm recovers a short input exactly and records its diagnostics."""
    target, _, _ = tiny
    ids = target.encode("The quick fox")[:3]
    config = GradientConfig(steps=100, candidates=64, learning_rate=0.05, trace_every=50, seed=0)
    result = invert_gradient(target, target.hidden_states(ids), config, true_token_ids=ids)
    assert result.token_ids == ids
    assert result.proven and result.cumulative_loss < 1e-8
    for p in result.positions:
        assert p.true_rank_trace[0][0] == 0 and p.true_rank_trace[-1][0] == 100
        assert p.rank is not None and p.rank <= 64


def test_gradient_fallback_commits_nearest_and_flags_it(tiny):
    """With no Adam steps and one candidate the published fallback commits a flagged guess."""
    target, _, _ = tiny
    ids = target.encode("Alice Smith, 12 Baker St")
    config = GradientConfig(steps=0, candidates=1, seed=3)
    result = invert_gradient(target, target.hidden_states(ids), config, true_token_ids=ids)
    wrong = [p for p in result.positions if p.token_id != p.true_token_id]
    assert wrong, "a random start with one candidate should miss some tokens"
    for p in result.positions:
        assert (p.status == "proven") == (p.token_id == p.true_token_id)
    assert result.cumulative_loss > 1e-4


def test_forced_failure_is_detected_without_the_text(tiny):
    """A starved search (one candidate, no fallback) fails, and the discrete loss shows where."""
    target, artifacts, _ = tiny
    ids = target.encode(TEXT)
    states = target.hidden_states(ids)
    good = invert_fast(target, states, artifacts, true_token_ids=ids)

    class Sabotaged(SetupArtifacts):
        def rank(self, target, states):
            """Each order rotated by one, so the ranker's best guess is never tried first."""
            return [torch.roll(order, -1) for order in super().rank(target, states)]

    bad = Sabotaged(artifacts.ranker, artifacts.table, artifacts.duplicates, artifacts.meta)
    starved = invert_fast(target, states, bad, max_candidates=1, true_token_ids=ids)
    assert good.exact_match
    assert not starved.exact_match
    for p in starved.positions:
        assert (p.status == "proven") == (p.token_id == p.true_token_id)
    first_bad = min(p.position for p in starved.positions if p.token_id != p.true_token_id)
    assert starved.positions[first_bad].discrete_loss > 1e4 * max(
        q.discrete_loss for q in good.positions
    )
    assert starved.cumulative_loss > 1e4 * good.cumulative_loss


class _Reversed(SetupArtifacts):
    """The ranker's order reversed: the true token comes near the end of every search."""

    def rank(self, target, states):
        return [torch.flip(order, [0]) for order in super().rank(target, states)]


def test_screening_finds_the_tail_and_never_decides(tiny, monkeypatch):
    """Reduced-precision screening reorders the tail; only full-precision verification proves.

    With the truth ranked last, the screened search still proves every token after
    few full-precision checks; a screener that lies (everything far, or everything
    close) changes the cost, never the answer.
    """
    target, artifacts, _ = tiny
    ids = target.encode(TEXT)
    states = target.hidden_states(ids)
    bad = _Reversed(artifacts.ranker, artifacts.table, artifacts.duplicates, artifacts.meta)
    plain = invert_fast(target, states, bad, true_token_ids=ids, screen=False)
    screened = invert_fast(target, states, bad, true_token_ids=ids, screen=True)
    assert plain.exact_match and plain.proven
    assert screened.exact_match and screened.proven
    assert screened.config["screen"] and not plain.config["screen"]
    for p, q in zip(screened.positions, plain.positions, strict=True):
        assert p.rank == q.rank > 8
        assert p.screened > 0
        verified = p.candidates_checked - p.screened
        assert verified < q.candidates_checked  # far fewer full-precision passes
    assert max(p.discrete_loss for p in screened.positions) < 1e-8

    def far(prefix, candidates, state):
        return torch.full((candidates.numel(),), 1e9)

    monkeypatch.setattr(target, "screen", far)
    lied = invert_fast(target, states, bad, true_token_ids=ids, screen=True)
    assert lied.exact_match and lied.proven
    assert all(p.screened < p.candidates_checked for p in lied.positions)

    def close(prefix, candidates, state):
        return torch.zeros(candidates.numel())

    monkeypatch.setattr(target, "screen", close)
    fooled = invert_fast(target, states, bad, true_token_ids=ids, screen=True)
    assert fooled.exact_match and fooled.proven


def test_a_chunk_verifies_only_its_closest_screened_candidates(tiny, monkeypatch):
    """Where every token screens under the line (a generic state), a chunk verifies only
    its CHECKS_PER_CHUNK closest at full precision, not all of them: the true token, the
    closest, is proven after the head and at most that many more."""
    import companion.audit.invert as invert

    target, artifacts, _ = tiny
    ids = target.encode(TEXT)
    states = target.hidden_states(ids)
    bad = _Reversed(artifacts.ranker, artifacts.table, artifacts.duplicates, artifacts.meta)
    verify = target.verify

    def all_close(prefix, candidates, state):  # the right order, everything under the line
        return verify(prefix, candidates, state)[1] * 1e-9

    monkeypatch.setattr(target, "screen", all_close)
    head = sum(invert.FULL_PRECISION_HEAD)
    for cap, most in ((4, head + 4), (10_000, None)):
        monkeypatch.setattr(invert, "CHECKS_PER_CHUNK", cap)
        result = invert_fast(target, states, bad, true_token_ids=ids, screen=True)
        assert result.exact_match and result.proven
        for p in result.positions:
            assert p.rank is not None and p.rank > head
            fp32 = p.candidates_checked - p.screened
            if most is not None:
                assert fp32 <= most
            else:  # uncapped: the whole chunk's close candidates were verified at once
                assert fp32 > head + 4


def test_state_from_no_token_is_unresolvable(tiny):
    """A state no token can produce is searched exhaustively and reported unresolved."""
    target, artifacts, _ = tiny
    ids = target.encode("Sydney fires")
    states = target.hidden_states(ids).clone()
    states[1] = torch.randn(states.shape[1], generator=torch.Generator().manual_seed(1))
    result = invert_fast(target, states, artifacts, true_token_ids=ids)
    p = result.positions[1]
    assert p.status == "unresolved" and p.candidates_checked == target.vocab_size
    assert result.flagged_positions and 1 in result.flagged_positions
    assert len(p.nearest) == 5


def test_noisy_states_report_nearest_candidates(tiny):
    """Under noise no proof is claimed; small noise is still recovered, big noise is not."""
    target, artifacts, _ = tiny
    ids = target.encode("The prime")
    states = target.hidden_states(ids)
    gen = torch.Generator().manual_seed(2)
    small = invert_fast(
        target,
        states + 1e-3 * torch.randn(states.shape, generator=gen),
        artifacts,
        tolerance=None,
        max_candidates=target.vocab_size,
        true_token_ids=ids,
    )
    assert all(p.status == "nearest" for p in small.positions)
    assert small.token_accuracy == 1.0
    assert all(p.nearest and p.nearest[0]["token_id"] == p.token_id for p in small.positions)
    big = invert_fast(
        target,
        states + 10.0 * torch.randn(states.shape, generator=gen),
        artifacts,
        tolerance=None,
        true_token_ids=ids,
    )
    assert big.token_accuracy is not None and big.token_accuracy < 0.5


def test_identical_embeddings_are_reported_ambiguous(tmp_path, monkeypatch):
    """Two tokens with the same embedding cannot be told apart; the proof says so."""
    monkeypatch.setenv("VEIL_HOME", str(tmp_path / "home"))
    folder = make_tiny_model(tmp_path / "m", arch="llama")
    loaded = load_causal_lm(str(folder), device="cpu")
    target = TargetModel(loaded)
    ids = target.encode("The quick brown fox")
    a, b = ids[2], (ids[2] + 7) % target.vocab_size
    with torch.no_grad():
        loaded.model.get_input_embeddings().weight[b] = loaded.model.get_input_embeddings().weight[
            a
        ]
    target = TargetModel(loaded)
    artifacts = run_setup(target, SMALL)
    result = invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids)
    p = result.positions[2]
    assert p.status == "ambiguous" and p.token_id in (a, b)
    assert ({p.token_id, *p.alternatives}) == {a, b}
    assert 2 in result.flagged_positions


def test_setup_is_cached_and_resumable(tmp_path, monkeypatch):
    """An interrupted setup resumes without redoing finished stages, then loads from disk."""
    monkeypatch.setenv("VEIL_HOME", str(tmp_path / "home"))
    folder = make_tiny_model(tmp_path / "m", arch="gpt2")
    target = TargetModel(load_causal_lm(str(folder), device="cpu"))

    class Stop(Exception):
        pass

    def interrupt(stage: str, done: int, total: int) -> None:
        if stage == "training the ranker" and done > 1:
            raise Stop

    with pytest.raises(Stop):
        run_setup(target, SMALL, progress=interrupt)
    assert not is_ready(target)
    with pytest.raises(StateError, match="veil audit setup"):
        load_setup(target)
    table = setup_dir(target) / "table.pt"
    corpus = setup_dir(target) / "corpus.pt"
    stamps = (table.stat().st_mtime_ns, corpus.stat().st_mtime_ns)
    stages: set[str] = set()
    artifacts = run_setup(target, SMALL, progress=lambda s, d, t: stages.add(s))
    assert "position-0 table" not in stages and "generating training text" not in stages
    assert (table.stat().st_mtime_ns, corpus.stat().st_mtime_ns) == stamps
    assert is_ready(target) and artifacts.meta["key"] == target.key
    meta = json.loads((setup_dir(target) / "done.json").read_text())
    assert meta["setup_seconds"] > 0 and 0 <= meta["ranker"]["top512"] <= 1
    ranker = setup_dir(target) / "ranker.pt"
    stamp = ranker.stat().st_mtime_ns
    stages.clear()
    run_setup(
        target, dataclasses.replace(SMALL, mixture=0.3), progress=lambda s, d, t: stages.add(s)
    )
    assert not stages and ranker.stat().st_mtime_ns == stamp  # ranking-only knob: no rebuild
    run_setup(target, dataclasses.replace(SMALL, epochs=1), progress=lambda s, d, t: stages.add(s))
    assert "training the ranker" in stages and "generating training text" not in stages


def test_other_layers_are_inverted_too(tmp_path, monkeypatch):
    """Layer k (an intermediate block's output) works with its own setup."""
    monkeypatch.setenv("VEIL_HOME", str(tmp_path / "home"))
    folder = make_tiny_model(tmp_path / "m", arch="llama")
    target = TargetModel(load_causal_lm(str(folder), device="cpu"), layer=1)
    artifacts = run_setup(target, SMALL)
    ids = target.encode("Baker Street")
    result = invert_fast(target, target.hidden_states(ids), artifacts, true_token_ids=ids)
    assert result.exact_match and result.proven and result.layer == 1
    with pytest.raises(InvalidParameterError, match="layer 9"):
        TargetModel(target.loaded, layer=9)


# -- inputs -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".pt", ".npy", ".safetensors"])
def test_saved_states_round_trip_and_invert(tiny, tmp_path, suffix):
    """States saved as .pt, .npy or .safetensors load back and invert to the text."""
    target, _, _ = tiny
    ids = target.encode("Alice Smith")
    path = tmp_path / f"leak{suffix}"
    save_states(path, target.hidden_states(ids), identity=target.identity, layer=target.layer)
    result = run_inversion(target, InversionRequest(states_path=str(path)))
    assert result.token_ids == ids and result.proven


def _bytes_of(obj, suffix):
    import io

    buf = io.BytesIO()
    if suffix == ".npy":
        np.save(buf, obj)
    else:
        torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("obj", "suffix", "message"),
    [
        (np.zeros((4, 7), dtype=np.float32), ".npy", "width 7"),
        (np.zeros((4, 64), dtype=np.int64), ".npy", "floating point"),
        (torch.zeros(2, 4, 64), ".pt", r"shape \(T, d\)"),
        (torch.zeros(64), ".pt", r"shape \(T, d\)"),
        (torch.full((3, 64), float("nan")), ".pt", "NaN"),
        (torch.zeros(3, 64, dtype=torch.int32), ".pt", "float16"),
        ({"a": torch.zeros(3, 64), "b": torch.zeros(3, 64)}, ".pt", "several tensors"),
        ([1, 2, 3], ".pt", "does not hold a tensor"),
        (torch.zeros(0, 64), ".pt", "between 1 and"),
    ],
)
def test_bad_state_files_are_refused_clearly(obj, suffix, message):
    """Shape, dtype, value and container problems each get a message saying what is wrong."""
    with pytest.raises(InvalidParameterError, match=message):
        raw, meta = load_states_bytes(_bytes_of(obj, suffix), f"x{suffix}")
        validate_states(raw, hidden_size=64, metadata=meta)


def test_unreadable_and_unknown_files_are_refused(tmp_path):
    """Garbage bytes, unknown suffixes and missing files are refused with a message."""
    with pytest.raises(InvalidParameterError, match="could not read"):
        load_states_bytes(b"not a tensor", "x.safetensors")
    with pytest.raises(InvalidParameterError, match="unsupported file type"):
        load_states_bytes(b"", "x.csv")
    with pytest.raises(InvalidParameterError, match="no such file"):
        load_states_file(tmp_path / "missing.pt")
    with pytest.raises(InvalidParameterError, match="no tensor named 'c'"):
        load_states_bytes(_bytes_of({"a": torch.zeros(2, 4)}, ".pt"), "x.pt", key="c")


def test_states_from_another_model_are_refused(tiny, tmp_path):
    """A .safetensors file recording another model identity or layer is refused."""
    target, _, _ = tiny
    path = tmp_path / "other.safetensors"
    save_states(path, torch.zeros(3, target.hidden_size), identity="someone-else", layer=-1)
    with pytest.raises(InvalidParameterError, match="saved from model 'someone-else'"):
        prepare_states(target, InversionRequest(states_path=str(path)))
    save_states(path, torch.zeros(3, target.hidden_size), identity=target.identity, layer=3)
    with pytest.raises(InvalidParameterError, match="layer 3"):
        prepare_states(target, InversionRequest(states_path=str(path)))


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (InversionRequest(), "exactly one input"),
        (InversionRequest(text="a", states_path="b.pt"), "exactly one input"),
        (InversionRequest(text="  "), "empty"),
        (InversionRequest(text="a", method="magic"), "method"),
        (InversionRequest(text="a", sigma=-1.0), "sigma"),
        (InversionRequest(text="a", tolerance=0.0), "tolerance"),
        (InversionRequest(text="a", max_candidates=0), "max_candidates"),
        (InversionRequest(text="a", steps=-1), "steps"),
        (InversionRequest(text="a", candidates=0), "candidates"),
    ],
)
def test_bad_requests_are_refused(request_, message):
    """Each invalid option is named in the error."""
    with pytest.raises(InvalidParameterError, match=message):
        request_.validate()


def test_sigma_noise_is_applied_and_reproducible_with_a_seed(tiny):
    """sigma adds Gaussian noise of that size; a seed reproduces it, no seed draws fresh noise."""
    target, _, _ = tiny
    clean, _ = prepare_states(target, InversionRequest(text=TEXT))
    a, _ = prepare_states(target, InversionRequest(text=TEXT, sigma=0.5, seed=1))
    b, _ = prepare_states(target, InversionRequest(text=TEXT, sigma=0.5, seed=1))
    c, _ = prepare_states(target, InversionRequest(text=TEXT, sigma=0.5))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert abs(float((a - clean).std()) - 0.5) < 0.05


def test_cli_inverts_a_text_and_writes_json(tiny, tmp_path, capsys):
    """`veil audit invert --text` prints the recovery and writes the JSON result."""
    from companion.cli import main

    _, _, folder = tiny
    out = tmp_path / "r.json"
    code = main(
        [
            "audit",
            "invert",
            "--model",
            str(folder),
            "--device",
            "cpu",
            "--text",
            "Sydney",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert data["exact_match"] is True and data["all_proven"] is True
    assert data["text"] == "Sydney"
    assert "every token proven" in capsys.readouterr().out


def test_cli_saves_states_that_invert_back(tiny, tmp_path):
    """--save-states writes a file that `veil audit invert --states` turns back into the text."""
    from companion.cli import main

    _, _, folder = tiny
    path = tmp_path / "leak.safetensors"
    model = ["--model", str(folder), "--device", "cpu"]
    assert main(["audit", "invert", *model, "--text", "Baker St", "--save-states", str(path)]) == 0
    out = tmp_path / "r.json"
    assert main(["audit", "invert", *model, "--states", str(path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["text"] == "Baker St"


def test_cli_reports_bad_input_as_an_error(tiny, tmp_path, capsys):
    """A wrong-width state file is a one-line error and exit code 2, not a traceback."""
    from companion.cli import main

    _, _, folder = tiny
    path = tmp_path / "bad.npy"
    np.save(path, np.zeros((3, 5), dtype=np.float32))
    code = main(
        ["audit", "invert", "--model", str(folder), "--device", "cpu", "--states", str(path)]
    )
    assert code == 2
    assert "width 5" in capsys.readouterr().err


def test_tiny_model_is_loaded_by_the_shared_loader(tiny):
    """The tiny model goes through companion.models.load_causal_lm like any local model."""
    target, _, folder = tiny
    assert Path(target.loaded.source) == Path(folder)
    assert target.hidden_states([1, 2, 3]).shape == (3, target.hidden_size)


def test_no_screening_copy_for_large_models(tiny, monkeypatch):
    """Above the size limit no bfloat16 copy is made unless asked for; results are the same."""
    import companion.audit.hidden as hidden

    target, artifacts, _ = tiny
    ids = target.encode(TEXT)
    states = target.hidden_states(ids)
    monkeypatch.setattr(hidden, "SCREEN_MAX_PARAMS", 0)
    assert not target.can_screen
    result = invert_fast(target, states, artifacts, true_token_ids=ids)
    assert result.config["screen"] is False and result.exact_match and result.proven


def test_an_unresolved_position_commits_the_nearest_of_the_whole_vocabulary(tiny, monkeypatch):
    """A true state nudged just past the tolerance: no proof, and the token committed (and
    flagged) is the nearest one, even though it was verified, and failed, while screened."""
    target, artifacts, _ = tiny
    ids = target.encode(TEXT)
    states = target.hidden_states(ids).clone()
    states[1, 0] += 5e-3  # max-abs over the 1e-3 tolerance; still far nearer than any other
    bad = _Reversed(artifacts.ranker, artifacts.table, artifacts.duplicates, artifacts.meta)
    verify = target.verify

    def all_close(prefix, candidates, state):
        return verify(prefix, candidates, state)[1] * 1e-9

    monkeypatch.setattr(target, "screen", all_close)
    result = invert_fast(target, states[:2], bad, true_token_ids=ids[:2], screen=True)
    p = result.positions[1]
    assert p.status == "unresolved" and result.flagged_positions == [1]
    assert p.token_id == ids[1] and p.candidates_checked == target.vocab_size
    assert p.screened == 0  # every token was verified at full precision at the end
