"""``veil models pull``: fetched from a hub look-alike on loopback, resumed, checksummed,
then listed by GET /v1/models and answering as a chat model."""

from __future__ import annotations

import pytest

from companion.hub import (
    PARTIAL_FOLDER,
    PULL_MANIFEST,
    ChecksumMismatchError,
    HubFile,
    PullError,
    choose_files,
    pull,
)
from py_core.errors import InvalidParameterError
from tests.companion.hub_server import Hub, serve, stop

REPO = "veil-tests/tiny-chat"
BASE = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    from companion.audit.tiny import make_tiny_model

    folder = make_tiny_model(tmp_path_factory.mktemp("hub") / "tiny")
    return Hub.from_folder(REPO, folder).files


@pytest.fixture
def hub(tiny_files, monkeypatch):
    # Small chunks, so a broken connection leaves bytes on disk to resume from (the
    # library streams 10 MB chunks; the tiny model's weights are ~100 kB).
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    # the test run is offline (scripts/test.sh sets HF_HUB_OFFLINE=1, read at import);
    # pulling from the look-alike on loopback is what these tests are about
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    fake = Hub(REPO, dict(tiny_files))
    server, endpoint = serve(fake)
    fake.endpoint = endpoint  # type: ignore[attr-defined]
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    yield fake
    stop(server)


WEIGHTS = "model.safetensors"


def test_a_pull_resumes_a_broken_download_and_checks_every_hash(hub, tmp_path):
    """A connection that breaks mid-file is resumed with a Range request; hashes match."""
    size = len(hub.files[WEIGHTS])
    hub.drop_after[WEIGHTS] = size // 2
    result = pull(REPO, home=tmp_path, endpoint=None)  # HF_ENDPOINT names the look-alike
    folder = tmp_path / "models" / "tiny-chat"
    assert result.folder == folder and result.commit == hub.commit
    for path, data in hub.files.items():
        assert (folder / path).read_bytes() == data
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith(WEIGHTS) and r]
    assert ranges and int(ranges[0].removeprefix("bytes=").split("-")[0]) > 0
    # The second request asked only for the rest (from the last whole chunk written).
    assert size <= hub.served[WEIGHTS] < size + 4096
    listed = {f.path: f.sha256 for f in result.files}
    assert listed[WEIGHTS] == Hub.sha256(hub.files[WEIGHTS])
    assert (folder / PULL_MANIFEST).is_file()
    assert not (tmp_path / "models" / PARTIAL_FOLDER).exists()
    assert oct((folder / WEIGHTS).stat().st_mode & 0o777) == "0o600"


def test_a_stopped_pull_keeps_its_bytes_and_the_next_one_resumes(hub, tmp_path):
    """Stopped mid-file, nothing is installed; pulling again fetches only what was missing."""
    size = len(hub.files[WEIGHTS])
    hub.drop_after[WEIGHTS] = size // 3
    hub.fail_ranges.add(WEIGHTS)  # the retry within the run fails too: the pull stops
    with pytest.raises(PullError, match="resumes from there"):
        pull(REPO, home=tmp_path)
    assert not (tmp_path / "models" / "tiny-chat").exists()
    kept = next((tmp_path / "models" / PARTIAL_FOLDER).rglob("*.incomplete"))
    kept_bytes = kept.stat().st_size
    assert 0 < kept_bytes <= size // 3
    first = dict(hub.served)
    hub.fail_ranges.clear()
    result = pull(REPO, home=tmp_path)
    assert result.resumed_bytes == kept_bytes
    assert hub.served[WEIGHTS] - first[WEIGHTS] == size - result.resumed_bytes
    others = [p for p in hub.files if p != WEIGHTS]  # complete files were not fetched again
    assert all(hub.served[p] == len(hub.files[p]) for p in others)
    assert (tmp_path / "models" / "tiny-chat" / WEIGHTS).read_bytes() == hub.files[WEIGHTS]


def test_a_file_whose_hash_is_wrong_is_refused_and_deleted(hub, tmp_path):
    hub.corrupt.add(WEIGHTS)
    with pytest.raises(ChecksumMismatchError, match="SHA-256") as caught:
        pull(REPO, home=tmp_path)
    assert caught.value.expected == Hub.sha256(hub.files[WEIGHTS])
    assert not (tmp_path / "models" / "tiny-chat").exists()
    assert not list((tmp_path / "models").rglob(f"{WEIGHTS}*"))  # neither kept nor installed


def test_an_etag_that_contradicts_the_listing_is_refused_before_downloading(hub, tmp_path):
    hub.wrong_etag.add(WEIGHTS)
    with pytest.raises(ChecksumMismatchError, match="ETag"):
        pull(REPO, home=tmp_path)
    assert not any(m == "GET" and p.endswith(WEIGHTS) for m, p, _ in hub.requests)


def test_the_command_pulls_and_the_api_lists_and_answers_with_the_model(hub, tmp_path, capsys):
    """`veil models pull` prints what it fetches; GET /v1/models lists it; it answers."""
    import torch
    from fastapi.testclient import TestClient

    from companion.app import create_app
    from companion.cli import main
    from companion.settings import Settings
    from tests.companion.fakes import KeywordEmbedder

    assert main(["models", "pull", REPO, "--home", str(tmp_path), "--name", "tiny"]) == 0
    printed = capsys.readouterr().out
    assert f"{REPO}@{hub.commit[:12]}" in printed and "SHA-256 checked for 1 of" in printed
    assert main(["models", "list", "--home", str(tmp_path)]) == 0
    assert "tiny\tpulled\ttransformers" in capsys.readouterr().out
    # Pulling again under the same name is refused rather than mixing two downloads.
    assert main(["models", "pull", REPO, "--home", str(tmp_path), "--name", "tiny"]) == 2

    torch.set_num_threads(1)
    settings = Settings(home=tmp_path, preload_model=False, default_collection=None)
    app = create_app(settings, embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        cards = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
        card = cards["tiny"]["veil"]
        assert card["source"] == "pulled" and card["format"] == "transformers"
        assert card["description"] == f"pulled from {REPO}@{hub.commit[:12]}"
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "fox?"}],
            "max_tokens": 2,
            "defense": "none",
        }
        answer = client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "tiny"


@pytest.mark.parametrize(
    ("names", "include", "fetched"),
    [
        (
            ["config.json", "model.safetensors", "pytorch_model.bin"],
            [],
            ["config.json", "model.safetensors"],
        ),
        (
            ["config.json", "model.onnx", "model.safetensors"],
            [],
            ["config.json", "model.safetensors"],
        ),
        (["a.Q4_K_M.gguf", "a.Q8_0.gguf", "README.md"], ["*Q4_K_M.gguf"], ["a.Q4_K_M.gguf"]),
        (["config.json", "model.onnx"], ["*.onnx"], ["config.json", "model.onnx"]),
    ],
)
def test_which_files_a_pull_fetches(names, include, fetched):
    files = [HubFile(n, 1, None) for n in names]
    keep, _ = choose_files(files, include)
    assert [f.path for f in keep] == fetched


@pytest.mark.parametrize(
    ("names", "include", "message"),
    [
        (["a.Q4_K_M.gguf", "a.Q8_0.gguf"], [], "choose one with --include"),
        (["config.json"], ["*.gguf"], "no file matches"),
    ],
)
def test_an_ambiguous_or_empty_choice_is_refused(names, include, message):
    with pytest.raises(InvalidParameterError, match=message):
        choose_files([HubFile(n, 1, None) for n in names], include)


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b"])
def test_a_listed_path_outside_the_folder_is_refused(path):
    with pytest.raises(InvalidParameterError, match="unsafe"):
        HubFile(path, 1, None)


def test_offline_mode_is_respected_with_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PullError, match="HF_HUB_OFFLINE"):
        pull(REPO, home=tmp_path, endpoint="http://127.0.0.1:9")
    assert not (tmp_path / "models").exists()


def test_a_hub_that_cannot_be_reached_is_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    from tests.companion.fakes import free_port

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    with pytest.raises(PullError, match="hub"):
        pull(REPO, home=tmp_path, endpoint=f"http://127.0.0.1:{free_port()}")
