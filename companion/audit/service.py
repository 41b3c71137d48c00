"""What the CLI and the HTTP API share: opening a model, the request, running one inversion.

:class:`InversionRequest` is one audit: a text (its states are computed, then
inverted without looking at it again) or a saved state tensor; optional Gaussian
noise; the method and its knobs.  :func:`run_inversion` validates it, runs the
per-model setup if needed (with progress events) and returns an
:class:`~companion.audit.invert.InversionResult`.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from companion.audit import PUBLISHED
from companion.audit.hidden import TargetModel
from companion.audit.inputs import load_states_bytes, load_states_file, validate_states
from companion.audit.invert import (
    DEFAULT_TOLERANCE,
    GradientConfig,
    InversionResult,
    invert_fast,
    invert_gradient,
)
from companion.audit.ranker import SetupArtifacts, SetupConfig, is_ready, load_setup, run_setup
from py_core.errors import InvalidParameterError, StateError

Event = dict[str, Any]
EventCallback = Callable[[Event], None]
METHODS = ("fast", "gradient")
MAX_TEXT_TOKENS = 256


class SetupRequiredError(StateError):
    """The fast path needs the per-model setup, which never starts implicitly from a job."""


def open_target(
    spec: str | None = None,
    *,
    layer: int = -1,
    device: str = "auto",
    threads: int | None = None,
    source: str = "hidden",
) -> TargetModel:
    """Load a causal LM with the shared loader and wrap it for auditing."""
    from companion.models import load_causal_lm

    if threads is not None:
        if threads < 1:
            raise InvalidParameterError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
    return TargetModel(load_causal_lm(spec, device=device), layer=layer, source=source)


def setup_with_bar(
    target: TargetModel, config: SetupConfig | None = None, *, force: bool = False
) -> SetupArtifacts:
    """Run (or resume) the setup with a tqdm bar per stage on stderr."""
    import sys

    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            for old in bars.values():
                old.close()
            bar = bars[stage] = tqdm(desc=stage, total=total, file=sys.stderr, dynamic_ncols=True)
        bar.n = done
        bar.refresh()

    try:
        return run_setup(target, config, progress=progress, force=force)
    finally:
        for bar in bars.values():
            bar.close()


@dataclass
class InversionRequest:
    """One audit.  Exactly one of text, states_path, states_bytes."""

    text: str | None = None
    states_path: str | None = None
    states_bytes: bytes | None = None
    states_filename: str | None = None
    states_key: str | None = None
    method: str = "fast"
    sigma: float = 0.0
    noisy: bool | None = None  # None: noisy iff sigma > 0
    tolerance: float | None = None  # None: DEFAULT_TOLERANCE
    max_candidates: int | None = None
    steps: int = PUBLISHED.steps
    candidates: int = PUBLISHED.candidates
    learning_rate: float = PUBLISHED.learning_rate
    seed: int | None = None
    allow_setup: bool = True  # the CLI's `veil audit invert`; the HTTP API never sets up implicitly

    def validate(self) -> None:
        sources = [
            self.text is not None,
            self.states_path is not None,
            self.states_bytes is not None,
        ]
        if sum(sources) != 1:
            raise InvalidParameterError(
                "give exactly one input: a text, or a hidden-state file (.pt, .npy, .safetensors)"
            )
        if self.method not in METHODS:
            raise InvalidParameterError(f"method must be one of {METHODS}, got {self.method!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise InvalidParameterError(f"sigma must be a finite number >= 0, got {self.sigma}")
        if self.tolerance is not None and not (
            self.tolerance > 0 and math.isfinite(self.tolerance)
        ):
            raise InvalidParameterError(f"tolerance must be positive, got {self.tolerance}")
        if self.max_candidates is not None and self.max_candidates < 1:
            raise InvalidParameterError(
                f"max_candidates must be at least 1, got {self.max_candidates}"
            )
        if self.states_bytes is not None and not self.states_filename:
            raise InvalidParameterError(
                "an uploaded state file needs its file name (for the format)"
            )
        if self.text is not None and not self.text.strip():
            raise InvalidParameterError("the text is empty; give the text to audit")
        GradientConfig(
            steps=self.steps, candidates=self.candidates, learning_rate=self.learning_rate
        )

    @property
    def is_noisy(self) -> bool:
        return self.sigma > 0 if self.noisy is None else self.noisy


def prepare_states(
    target: TargetModel, request: InversionRequest
) -> tuple[torch.Tensor, list[int] | None]:
    """The (possibly noised) states to invert and, for a text input, the true token ids."""
    request.validate()
    truth: list[int] | None = None
    if request.text is not None:
        truth = target.encode(request.text)
        if len(truth) > MAX_TEXT_TOKENS:
            raise InvalidParameterError(
                f"the text has {len(truth)} tokens; at most {MAX_TEXT_TOKENS} can be audited at once"
            )
        states = target.hidden_states(truth)
    else:
        if request.states_bytes is not None:
            assert request.states_filename is not None
            raw, meta = load_states_bytes(
                request.states_bytes, request.states_filename, key=request.states_key
            )
        else:
            assert request.states_path is not None
            raw, meta = load_states_file(request.states_path, key=request.states_key)
        states = validate_states(
            raw,
            hidden_size=target.hidden_size,
            metadata=meta,
            identity=target.identity,
            layer=target.layer,
        ).to(target.device)
    if request.sigma > 0:
        gen = torch.Generator()
        gen.manual_seed(request.seed if request.seed is not None else secrets.randbits(63))
        noise = torch.randn(states.shape, generator=gen) * request.sigma
        states = states + noise.to(states.device)
    return states, truth


def run_inversion(
    target: TargetModel,
    request: InversionRequest,
    *,
    progress: EventCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    setup_config: SetupConfig | None = None,
) -> InversionResult:
    """Validate, set up if needed, and invert; progress events are plain dicts."""
    states, truth = prepare_states(target, request)
    return invert_prepared(
        target,
        request,
        states,
        truth,
        progress=progress,
        should_stop=should_stop,
        setup_config=setup_config,
    )


def invert_prepared(
    target: TargetModel,
    request: InversionRequest,
    states: torch.Tensor,
    truth: list[int] | None,
    *,
    progress: EventCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    setup_config: SetupConfig | None = None,
) -> InversionResult:
    """Invert states already checked by :func:`prepare_states`."""
    emit = progress or (lambda event: None)
    if request.method == "gradient":
        config = GradientConfig(
            steps=request.steps,
            candidates=request.candidates,
            learning_rate=request.learning_rate,
            tolerance=request.tolerance or DEFAULT_TOLERANCE,
            seed=request.seed,
        )
        return invert_gradient(
            target,
            states,
            config,
            true_token_ids=truth,
            callback=lambda e: emit({"kind": "position", **e}),
            should_stop=should_stop,
        )
    if is_ready(target):
        setup = load_setup(target)
    elif request.allow_setup:
        setup = run_setup(
            target,
            setup_config,
            progress=lambda stage, done, total: emit(
                {"kind": "setup", "stage": stage, "done": done, "total": total}
            ),
            should_stop=should_stop,
        )
    else:
        raise setup_required(target)
    tolerance = None if request.is_noisy else (request.tolerance or DEFAULT_TOLERANCE)
    return invert_fast(
        target,
        states,
        setup,
        tolerance=tolerance,
        max_candidates=request.max_candidates,
        true_token_ids=truth,
        callback=lambda e: emit({"kind": "position", **e}),
        should_stop=should_stop,
    )


def setup_required(target: TargetModel) -> SetupRequiredError:
    """The error a fast job gets when its model is not set up: what to run, and how long."""
    return SetupRequiredError(
        f"the inversion auditor is not set up for this model ({target.key}); run the setup "
        "first: the audit page's 'Set up' button, POST /v1/audit/setup, or `veil audit setup` "
        "(once per model and layer: about 3 minutes on two CPU cores for SmolLM2-135M, 4 for "
        "Qwen2.5-0.5B; GET /v1/audit/setup says how long on this machine)"
    )


# opener(spec, layer, source) -> the target a pool keeps for that key
Opener = Callable[[str | None, int, str], TargetModel]


def _open(spec: str | None, layer: int, source: str) -> TargetModel:
    return open_target(spec, layer=layer, source=source)


class ModelPool:
    """Models opened on demand and kept; opening one holds only that model's opening lock.

    No job lock lives here: which job runs when is the job manager's business
    (:mod:`companion.audit.jobs`), so reading a model (setup status, preparing
    states) never waits for a running job.
    """

    def __init__(self, opener: Opener | None = None) -> None:
        self._opener = opener or _open
        self._targets: dict[tuple[str | None, int, str], TargetModel] = {}
        self._opening: dict[tuple[str | None, int, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, spec: str | None, layer: int, source: str = "hidden") -> TargetModel:
        """The model ``spec`` seen at ``layer``'s ``source`` (hidden states, or the block's
        cached keys or values), opened the first time it is asked for."""
        key = (spec, layer, source)
        with self._guard:
            target = self._targets.get(key)
            if target is not None:
                return target
            lock = self._opening.setdefault(key, threading.Lock())
        with lock:  # only while this model is being opened
            with self._guard:
                target = self._targets.get(key)
            if target is None:
                target = self._opener(spec, layer, source)
                with self._guard:
                    self._targets[key] = target
        return target
