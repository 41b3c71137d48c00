"""``veil models pull``: a model the person chooses, from the Hugging Face hub, into ``<home>/models``.

The hub's own client (``huggingface_hub``) does the talking: ``HfApi.model_info``
(``GET /api/models/{repo}/revision/{rev}?blobs=true``) pins the revision to a commit
and lists the files with their sizes and, for LFS files, their SHA-256;
``get_hf_file_metadata`` (``HEAD /{repo}/resolve/{commit}/{file}``) gives each file's
ETag (``X-Linked-Etag``: the SHA-256 of an LFS file) and size; ``http_get`` streams the
bytes with a progress bar, resuming with a ``Range`` request after a dropped connection.

What Veil adds:

* **Resumable across runs.** Each file is written to
  ``<home>/models/.pull/<name>/<file>.incomplete`` and kept when the pull stops (an
  interrupted connection, Ctrl-C); the next pull of the same commit asks only for the
  bytes that are missing.  Files already complete are not fetched again.
* **Checksummed.** Every LFS file's SHA-256 is computed while it is written and must
  equal both the listing's ``lfs.sha256`` and the ETag of its ``HEAD``; a file that
  does not is deleted and the pull refused (:class:`ChecksumMismatchError`).  Small
  non-LFS files (``config.json``, the tokenizer) have no published SHA-256 (their ETag
  is a git blob id); their size is checked.
* **All or nothing.** The model appears under ``<home>/models/<name>`` (and so in
  ``GET /v1/models``) only once every file is complete and verified, with a
  ``veil-pull.json`` saying which repository, commit and hashes it came from.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py_core.errors import InvalidParameterError, VeilError

PULL_MANIFEST = "veil-pull.json"
PARTIAL_FOLDER = ".pull"
INCOMPLETE = ".incomplete"
# Formats the companion never loads: skipped unless --include names them.
SKIPPED_BY_DEFAULT = (
    "*.onnx",
    "onnx/*",
    "*.msgpack",
    "*.h5",
    "*.ot",
    "flax_model*",
    "tf_model*",
    "*.tflite",
    "*.mlmodel",
    "coreml/*",
    "openvino/*",
    ".gitattributes",
)
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ChecksumMismatchError(VeilError, ValueError):
    """A downloaded file's SHA-256 is not the one the hub published."""

    def __init__(self, path: str, expected: str, actual: str) -> None:
        super().__init__(
            f"{path}: SHA-256 {actual} is not the hub's {expected}; the file was deleted "
            "and the model not installed"
        )
        self.path, self.expected, self.actual = path, expected, actual


class PullError(VeilError, RuntimeError):
    """The hub could not be read, or a download stopped; what was fetched is kept."""


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file of a repository at a commit, as the hub lists it."""

    path: str
    size: int | None
    sha256: str | None  # LFS files only

    def __post_init__(self) -> None:
        parts = Path(self.path).parts
        if not parts or self.path.startswith("/") or ".." in parts:
            raise InvalidParameterError(f"the hub listed an unsafe file path {self.path!r}")


@dataclass
class PullResult:
    """What a pull did: where the model is, from which commit, and what it fetched."""

    name: str
    repo: str
    commit: str
    folder: Path
    files: list[HubFile]
    downloaded_bytes: int = 0
    resumed_bytes: int = 0  # bytes already on disk from an earlier, interrupted pull
    skipped: list[str] = field(default_factory=list)  # files not fetched (formats not loaded)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "repo": self.repo,
            "commit": self.commit,
            "folder": str(self.folder),
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            "downloaded_bytes": self.downloaded_bytes,
            "resumed_bytes": self.resumed_bytes,
            "skipped": self.skipped,
        }


def local_name(repo: str) -> str:
    """The folder name a pulled repository gets by default: its name after the owner."""
    return repo.rsplit("/", 1)[-1]


def check_repo(repo: str) -> str:
    if not _REPO.match(repo):
        raise InvalidParameterError(
            f"a model on the hub is named OWNER/NAME (e.g. Qwen/Qwen2.5-0.5B-Instruct); got {repo!r}"
        )
    return repo


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidParameterError(
            f"a local model name is letters, digits, '.', '_' and '-' (at most 128); got {name!r}"
        )
    return name


def choose_files(
    files: Sequence[HubFile], include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> tuple[list[HubFile], list[str]]:
    """The files to fetch and the ones left out.

    With ``include`` patterns (fnmatch), the files they match (and the small
    configuration files beside them: ``*.json``, ``*.txt``, ``*.model``); without,
    every file but the formats the companion never loads, and ``*.bin`` weights
    when the repository also has safetensors.  A repository with several ``.gguf``
    files needs ``--include`` to say which one.
    """

    def matches(path: str, patterns: Sequence[str]) -> bool:
        return any(
            fnmatch.fnmatch(path, p) or fnmatch.fnmatch(Path(path).name, p) for p in patterns
        )

    paths = [f.path for f in files]
    if include:
        keep = [
            f
            for f in files
            if matches(f.path, include)
            or (Path(f.path).suffix in (".json", ".txt", ".model", ".jinja") and "/" not in f.path)
        ]
        if not any(matches(f.path, include) for f in files):
            raise InvalidParameterError(
                f"no file matches {', '.join(include)}; the repository has {', '.join(paths)}"
            )
    else:
        ggufs = [p for p in paths if p.endswith(".gguf")]
        if len(ggufs) > 1:
            raise InvalidParameterError(
                f"the repository has {len(ggufs)} GGUF files; choose one with --include "
                f"(e.g. --include '{ggufs[0]}'): {', '.join(ggufs)}"
            )
        has_safetensors = any(p.endswith(".safetensors") for p in paths)
        keep = [
            f
            for f in files
            if not matches(f.path, SKIPPED_BY_DEFAULT)
            and not (has_safetensors and f.path.endswith(".bin"))
        ]
    keep = [f for f in keep if not matches(f.path, exclude)]
    left = [f.path for f in files if f not in keep]
    if not keep:
        raise InvalidParameterError(f"nothing to fetch from {', '.join(paths) or 'an empty repo'}")
    return keep, left


def list_files(
    repo: str, revision: str, *, endpoint: str | None, token: str | None
) -> tuple[str, list[HubFile]]:
    """(commit, files) of ``repo`` at ``revision``, from ``GET /api/models/{repo}/revision/{rev}``."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except HfHubHTTPError as exc:
        raise PullError(f"the hub did not list {repo}@{revision}: {exc}") from exc
    except Exception as exc:  # connection refused, DNS, a timeout (the client's own errors)
        raise PullError(
            f"could not reach the hub at {endpoint or 'its default address'} for {repo}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not info.sha:
        raise PullError(f"the hub gave no commit for {repo}@{revision}")
    files = []
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        sha = getattr(lfs, "sha256", None) if lfs is not None else None
        size = sibling.size if sibling.size is not None else getattr(lfs, "size", None)
        files.append(HubFile(sibling.rfilename, size, sha.lower() if sha else None))
    return info.sha, files


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(
    repo: str,
    commit: str,
    file: HubFile,
    partial_dir: Path,
    *,
    endpoint: str | None,
    token: str | None,
    tqdm_class: Any,
) -> tuple[Path, int, int]:
    """Download one file into ``partial_dir`` (resuming), check it; (path, fetched, resumed)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.file_download import http_get

    target = partial_dir / file.path
    if target.exists() and _complete(target, file):
        return target, 0, 0
    url = hf_hub_url(repo, file.path, revision=commit, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=token or False, endpoint=endpoint)
    except HfHubHTTPError as exc:
        raise PullError(f"the hub did not describe {file.path}: {exc}") from exc
    if meta.commit_hash and meta.commit_hash != commit:
        raise PullError(
            f"{file.path}: the hub answered for commit {meta.commit_hash}, not {commit}; pull again"
        )
    expected_sha = file.sha256
    etag = (meta.etag or "").lower()
    if expected_sha and etag and re.fullmatch(r"[0-9a-f]{64}", etag) and etag != expected_sha:
        raise ChecksumMismatchError(file.path, expected_sha, f"(the ETag says {etag})")
    if expected_sha is None and re.fullmatch(r"[0-9a-f]{64}", etag):
        expected_sha = etag  # an LFS file the listing gave no hash for: the ETag is its SHA-256
    size = meta.size if meta.size is not None else file.size
    incomplete = target.with_name(target.name + INCOMPLETE)
    incomplete.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    resumed = incomplete.stat().st_size if incomplete.exists() else 0
    if size is not None and resumed > size:  # not the same file: start again
        incomplete.unlink()
        resumed = 0
    headers = {"authorization": f"Bearer {token}"} if token else None
    with incomplete.open("ab") as handle:
        os.chmod(incomplete, 0o600)
        try:
            http_get(
                meta.location or url,
                handle,
                resume_size=resumed,
                headers=headers,
                expected_size=size,
                displayed_filename=file.path,
                tqdm_class=tqdm_class,
            )
        except (HfHubHTTPError, OSError) as exc:
            raise PullError(
                f"{file.path}: the download stopped ({exc}); {incomplete.stat().st_size} bytes "
                "are kept and `veil models pull` again resumes from there"
            ) from exc
        except Exception as exc:  # httpx errors after the retries, a size mismatch
            raise PullError(
                f"{file.path}: the download stopped ({type(exc).__name__}: {exc}); what was "
                "fetched is kept and `veil models pull` again resumes from there"
            ) from exc
    got = incomplete.stat().st_size
    if size is not None and got != size:
        incomplete.unlink()
        raise PullError(f"{file.path}: got {got} bytes, the hub said {size}; pull again")
    if expected_sha is not None:
        actual = _sha256_file(incomplete)
        if actual != expected_sha:
            incomplete.unlink()
            raise ChecksumMismatchError(file.path, expected_sha, actual)
    incomplete.rename(target)
    return target, got - resumed, resumed


def _complete(path: Path, file: HubFile) -> bool:
    if file.size is not None and path.stat().st_size != file.size:
        return False
    return file.sha256 is None or _sha256_file(path) == file.sha256


def pull(
    repo: str,
    *,
    home: Path,
    revision: str = "main",
    name: str | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    endpoint: str | None = None,
    token: str | None = None,
    tqdm_class: Any = None,
    say: Callable[[str], None] = lambda _text: None,
) -> PullResult:
    """Fetch ``repo`` at ``revision`` into ``<home>/models/<name>``; see the module's notes.

    ``endpoint`` defaults to ``$HF_ENDPOINT`` (the hub's own default otherwise);
    ``token`` to ``$HF_TOKEN`` (only gated or private repositories need one).
    """
    check_repo(repo)
    name = check_name(name or local_name(repo))
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise PullError(
            "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set in this environment, which "
            "forbids downloads; unset it for this command to pull a model"
        )
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    token = token or os.environ.get("HF_TOKEN") or None
    models = home / "models"
    final = models / name
    if final.exists():
        raise InvalidParameterError(
            f"{final} already exists; remove it or pull under another --name"
        )
    commit, listed = list_files(repo, revision, endpoint=endpoint, token=token)
    files, skipped = choose_files(listed, include, exclude)
    total = sum(f.size or 0 for f in files)
    say(
        f"{repo}@{commit[:12]}: {len(files)} files, {total / 1e6:.1f} MB, into {final}"
        + (f" (not fetched: {', '.join(skipped)})" if skipped else "")
    )
    partial_dir = models / PARTIAL_FOLDER / f"{name}-{commit[:12]}"
    partial_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in (home, models, models / PARTIAL_FOLDER):
        os.chmod(folder, 0o700)
    result = PullResult(name, repo, commit, final, files, skipped=skipped)
    for file in files:
        _, fetched, resumed = _fetch(
            repo, commit, file, partial_dir, endpoint=endpoint, token=token, tqdm_class=tqdm_class
        )
        result.downloaded_bytes += fetched
        result.resumed_bytes += resumed
        if resumed:
            say(f"{file.path}: resumed after {resumed} bytes fetched earlier")
    manifest = {
        "repo": repo,
        "revision": revision,
        "commit": commit,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
    }
    (partial_dir / PULL_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    for path in partial_dir.rglob("*"):
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    partial_dir.rename(final)
    with_leftovers = models / PARTIAL_FOLDER
    if with_leftovers.is_dir() and not any(with_leftovers.iterdir()):
        shutil.rmtree(with_leftovers, ignore_errors=True)
    return result


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The ``veil-pull.json`` of a pulled model's folder, or None."""
    path = folder / PULL_MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
