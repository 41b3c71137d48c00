"""Loading leaked hidden states from .pt, .npy or .safetensors files, with clear errors.

A file holds one tensor of shape (T, d) or (1, T, d) — or, for .pt and
.safetensors, a dict of tensors from which ``key`` picks one (a single entry is
taken without a key).  Files written by :func:`save_states` also record the model
identity and layer; a mismatch with the model being audited is refused.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_core.errors import InvalidParameterError

SUFFIXES = (".pt", ".pth", ".npy", ".safetensors")
MAX_TOKENS = 1024
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def load_states_bytes(
    data: bytes, filename: str, *, key: str | None = None
) -> tuple[torch.Tensor, dict[str, str]]:
    """(tensor, metadata) from the bytes of an uploaded file; the suffix picks the format."""
    suffix = Path(filename).suffix.lower()
    metadata: dict[str, str] = {}
    try:
        if suffix in (".pt", ".pth"):
            obj: Any = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        elif suffix == ".npy":
            obj = np.load(io.BytesIO(data), allow_pickle=False)
        elif suffix == ".safetensors":
            from safetensors.torch import load as st_load

            obj = st_load(data)
            metadata = _safetensors_metadata(data)
        else:
            raise InvalidParameterError(
                f"unsupported file type {suffix or filename!r}: use one of {', '.join(SUFFIXES)}"
            )
    except InvalidParameterError:
        raise
    except Exception:  # corrupt or foreign files: say what failed, not the reader's words
        raise InvalidParameterError(
            f"could not read {filename!r} as {suffix}: the file is damaged, or it holds "
            "something other than plain tensors (pickled objects are never loaded)"
        ) from None
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor | np.ndarray)}
        if key is not None:
            if key not in tensors:
                raise InvalidParameterError(
                    f"{filename!r} has no tensor named {key!r}; it has {sorted(tensors)}"
                )
            obj = tensors[key]
        elif len(tensors) == 1:
            obj = next(iter(tensors.values()))
        else:
            raise InvalidParameterError(
                f"{filename!r} holds several tensors {sorted(tensors)}; choose one with key"
            )
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind != "f":
            raise InvalidParameterError(
                f"hidden states must be floating point, {filename!r} holds {obj.dtype}"
            )
        obj = torch.from_numpy(np.ascontiguousarray(obj))
    if not isinstance(obj, torch.Tensor):
        raise InvalidParameterError(
            f"{filename!r} does not hold a tensor (found {type(obj).__name__})"
        )
    return obj, metadata


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_len])
    return dict(header.get("__metadata__") or {})


def load_states_file(
    path: str | Path, *, key: str | None = None
) -> tuple[torch.Tensor, dict[str, str]]:
    path = Path(path)
    if not path.is_file():
        raise InvalidParameterError(f"no such file: {str(path)!r}")
    return load_states_bytes(path.read_bytes(), path.name, key=key)


def validate_states(
    states: torch.Tensor,
    *,
    hidden_size: int,
    metadata: dict[str, str] | None = None,
    identity: str | None = None,
    layer: int | None = None,
) -> torch.Tensor:
    """Check dtype, shape, values and provenance; return (T, d) float32."""
    if states.dtype not in _FLOAT_DTYPES:
        raise InvalidParameterError(
            f"hidden states must be float16, bfloat16, float32 or float64, got {states.dtype}"
        )
    if states.ndim == 3 and states.shape[0] == 1:
        states = states[0]
    if states.ndim != 2:
        raise InvalidParameterError(
            f"hidden states must have shape (T, d) or (1, T, d), got {tuple(states.shape)}"
        )
    if states.shape[1] != hidden_size:
        raise InvalidParameterError(
            f"hidden states have width {states.shape[1]} but this model's hidden size is "
            f"{hidden_size}: they come from another model (or were transposed)"
        )
    if not 1 <= states.shape[0] <= MAX_TOKENS:
        raise InvalidParameterError(
            f"hidden states hold {states.shape[0]} positions; between 1 and {MAX_TOKENS} are supported"
        )
    if not torch.isfinite(states).all():
        raise InvalidParameterError("hidden states contain NaN or infinite values")
    if metadata:
        if identity is not None and metadata.get("model") not in (None, identity):
            raise InvalidParameterError(
                f"these states were saved from model {metadata['model']!r}, "
                f"but the auditor is running {identity!r}; pick the matching model"
            )
        if layer is not None and metadata.get("layer") not in (None, str(layer)):
            raise InvalidParameterError(
                f"these states were saved from layer {metadata['layer']}, not layer {layer}"
            )
    return states.float()


def save_states(path: str | Path, states: torch.Tensor, *, identity: str, layer: int) -> None:
    """Save (T, d) states with their model identity, in the format the suffix names."""
    path = Path(path)
    suffix = path.suffix.lower()
    tensor = states.detach().float().cpu().contiguous()
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(
            {"hidden_states": tensor}, str(path), metadata={"model": identity, "layer": str(layer)}
        )
    elif suffix in (".pt", ".pth"):
        torch.save({"hidden_states": tensor}, path)
    elif suffix == ".npy":
        np.save(path, tensor.numpy())
    else:
        raise InvalidParameterError(
            f"unsupported file type {suffix!r}: use one of {', '.join(SUFFIXES)}"
        )
