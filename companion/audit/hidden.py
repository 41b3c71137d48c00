"""Hidden states of a causal LM, and exact verification of candidate tokens.

:class:`TargetModel` wraps a :class:`companion.models.LoadedModel` and exposes
what the inversion attacks need:

* ``hidden_states(ids)``: the states the auditor inverts (by default the last
  layer, after the final norm; ``layer=k`` takes the output of block ``k``);
* a :class:`Prefix` holding the committed tokens' key/value cache, so a
  candidate for position ``t`` costs one single-token forward pass;
* ``verify(prefix, candidates, target)``: a batch of candidates at the next
  position, each scored against the leaked state (max-abs deviation and MSE);
* ``screen(prefix, candidates, target)``: the same at reduced precision (a
  bfloat16 copy of the model, ~3x faster on CPUs with bf16 support), used only to
  *order* candidates — a token is proven by ``verify`` alone.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from py_core.errors import InvalidParameterError

SOURCES = ("hidden", "keys", "values")  # what leaked: hidden states, or a block's KV cache
# Memory for the key/value tensors of one verification batch (bytes).  A batch
# of B candidates after a prefix of length T holds 2·layers·B·(T+1)·kv_dim floats.
_KV_BUDGET_BYTES = 384 << 20
MAX_BATCH = 1024
# The screening copy costs 2 bytes per parameter; above this size it is not made
# unless asked for (``invert_fast(screen=True)``).  Qwen2.5-Coder-1.5B, the served
# default where installed, has 1.54 B (a 3.1 GB copy beside its 6.2 GB float32 weights).
SCREEN_MAX_PARAMS = 2_000_000_000


def cache_of(out: Any) -> Any:
    """The key/value cache of a model output (``cache`` in transformers 5, else the old name)."""
    if "cache" in getattr(out, "__dataclass_fields__", {}):
        return out.cache
    return getattr(out, "past_key_values", None)


@dataclass
class Prefix:
    """The committed tokens and their per-layer key/value cache (batch size 1)."""

    ids: list[int] = field(default_factory=list)
    kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    # The screening model's cache for the same tokens, built on first use.
    screen_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class PriorHead:
    """The output layer that turns a last-layer state into next-token logits."""

    weight: torch.Tensor  # (V, d)
    bias: torch.Tensor | None
    tied: bool  # the weight is the input embedding matrix


class TargetModel:
    """A causal LM seen as a map from token ids to hidden states."""

    def __init__(self, loaded: Any, *, layer: int = -1, source: str = "hidden") -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.identity: str = loaded.identity
        self.device = torch.device(loaded.device)
        self.base = self.model.base_model
        self.embedding: torch.Tensor = self.model.get_input_embeddings().weight.detach()
        self.vocab_size, self.embed_dim = self.embedding.shape
        config = self.model.config
        self.num_layers = int(
            getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 0
        )
        if source not in SOURCES:
            raise InvalidParameterError(
                f"source must be one of {', '.join(SOURCES)} (hidden states, or the key/value "
                f"cache of a block); got {source!r}"
            )
        self.source = source
        if source == "hidden" and (
            layer < -1 or layer > self.num_layers or (layer == -1 and self.num_layers == 0)
        ):
            raise InvalidParameterError(
                f"layer {layer} is out of range: use -1 (last layer, after the final norm) "
                f"or 0..{self.num_layers} (0 = embeddings, k = output of block k)"
            )
        if source != "hidden" and not (layer == -1 or 1 <= layer <= self.num_layers):
            raise InvalidParameterError(
                f"layer {layer} is out of range for the {source} cache: use -1 (the last "
                f"block) or 1..{self.num_layers} (block k's cached {source})"
            )
        self.layer = layer
        self.model_dim = int(getattr(config, "hidden_size", None) or config.n_embd)
        self.hidden_size = self.model_dim  # the width of what is audited
        if source != "hidden":  # a cached key or value: every KV head of the block, concatenated
            heads = int(
                getattr(config, "num_key_value_heads", None)
                or getattr(config, "num_attention_heads", None)
                or config.n_head
            )
            head_dim = int(
                getattr(config, "head_dim", None)
                or self.model_dim // int(getattr(config, "num_attention_heads", 0) or config.n_head)
            )
            self.hidden_size = heads * head_dim
        params = inspect.signature(self.base.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._cache_cls: Any = None
        self._screen_base: Any = None
        self._screen_checked = False
        self._params: int | None = None

    # -- plain forward passes -------------------------------------------------

    @property
    def key(self) -> str:
        """Identity of (weights, layer, source): what a ranker or a table is valid for."""
        suffix = "" if self.source == "hidden" else f"-{self.source}"
        return f"{self.identity}-L{self.layer}{suffix}"

    @property
    def _wants_hidden(self) -> bool:
        return self.source == "hidden" and self.layer != -1

    def _select(self, out: Any) -> torch.Tensor:
        """(B, T, d) of what is audited: a layer's states, or a block's cached keys/values
        (every KV head concatenated, keys after their rotary position encoding)."""
        if self.source != "hidden":
            block = cache_of(out).layers[self.layer - 1 if self.layer > 0 else -1]
            cached = block.keys if self.source == "keys" else block.values  # (B, H, T, hd)
            return cached.permute(0, 2, 1, 3).reshape(cached.shape[0], cached.shape[2], -1)
        if self.layer == -1:
            return out.last_hidden_state
        return out.hidden_states[self.layer]

    def _forward(self, **kwargs: Any) -> Any:
        if self.source != "hidden":
            kwargs["use_cache"] = True
        return self.base(output_hidden_states=self._wants_hidden, **kwargs)

    @torch.no_grad()
    def hidden_states(self, ids: torch.Tensor | list[int]) -> torch.Tensor:
        """States (T, d) for one sequence of token ids, computed without any cache."""
        ids_t = torch.as_tensor(ids, dtype=torch.long, device=self.device).reshape(1, -1)
        return self._select(self._forward(input_ids=ids_t, use_cache=False))[0].float()

    @torch.no_grad()
    def batch_hidden_states(self, ids: torch.Tensor, *, reduced: bool = False) -> torch.Tensor:
        """States (B, T, d) for a batch of equal-length sequences.

        ``reduced``: computed by the bfloat16 copy where that is fast (:attr:`can_screen`;
        ~4x the float32 throughput on a CPU with AMX), else at full precision.  Only for
        what orders candidates (the ranker's training states, the position-0 table):
        a token is proven by :meth:`verify` alone.
        """
        ids_t = ids.to(self.device)
        if reduced and self.can_screen:
            out = self._screener()(
                input_ids=ids_t,
                use_cache=self.source != "hidden",
                output_hidden_states=self._wants_hidden,
            )
            return self._select(out).float()
        return self._select(self._forward(input_ids=ids_t, use_cache=False)).float()

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        if not ids:
            raise InvalidParameterError("the text is empty after tokenization; give some text")
        return [int(i) for i in ids]

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def token_text(self, token_id: int) -> str:
        return str(self.tokenizer.decode([token_id]))

    # -- the prefix cache -----------------------------------------------------

    def _make_cache(self, kv: list[tuple[torch.Tensor, torch.Tensor]], batch: int) -> Any:
        from transformers import DynamicCache

        data = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in kv]
        return DynamicCache(ddp_cache_data=data, config=self.model.config)

    def _step(
        self,
        prefix: Prefix,
        batch: int,
        *,
        input_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        keep_cache: bool = False,
        screen: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """One new position for ``batch`` rows after ``prefix``: (states (B, d), cache)."""
        kv = prefix.screen_kv if screen else prefix.kv
        kwargs: dict[str, Any] = {
            "use_cache": keep_cache or kv is not None or self.source != "hidden"
        }
        if kv is not None:
            kwargs[self._cache_kw] = self._make_cache(kv, batch)
        if input_ids is not None:
            kwargs["input_ids"] = input_ids.reshape(batch, 1).to(self.device)
        else:
            assert inputs_embeds is not None
            kwargs["inputs_embeds"] = inputs_embeds.reshape(batch, 1, -1)
        base = self._screen_base if screen else self.base
        out = base(output_hidden_states=self._wants_hidden, **kwargs)
        cache = cache_of(out)
        return self._select(out)[:, -1].float(), cache

    def batch_size_for(self, prefix_len: int) -> int:
        """Largest candidate batch whose key/value tensors fit the memory budget."""
        config = self.model.config
        heads = int(
            getattr(config, "num_key_value_heads", None)
            or getattr(config, "num_attention_heads", None)
            or config.n_head
        )
        head_dim = int(
            getattr(config, "head_dim", None) or self.model_dim // int(config.num_attention_heads)
        )
        per_row = 2 * max(self.num_layers, 1) * (prefix_len + 1) * heads * head_dim * 4
        return int(max(8, min(MAX_BATCH, _KV_BUDGET_BYTES // max(per_row, 1))))

    @torch.no_grad()
    def verify(
        self, prefix: Prefix, candidates: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(max-abs deviation (B,), MSE (B,), cache) of each candidate at the next position."""
        batch = int(candidates.numel())
        states, cache = self._step(prefix, batch, input_ids=candidates, keep_cache=True)
        diff = states - target.to(states.device).reshape(1, -1)
        return diff.abs().amax(dim=-1), diff.pow(2).mean(dim=-1), cache

    # -- reduced-precision screening -------------------------------------------

    @property
    def can_screen(self) -> bool:
        """Whether a bfloat16 screening copy is worth having: fast bf16 here, and a model
        small enough that a second copy of its weights is cheap."""
        from companion.models import bf16_supported

        if self._params is None:
            self._params = sum(p.numel() for p in self.model.parameters())
        return self._params <= SCREEN_MAX_PARAMS and bf16_supported(self.device.type)

    def _screener(self) -> Any:
        if self._screen_base is None:
            model = copy.deepcopy(self.model).to(torch.bfloat16).eval()
            for p in model.parameters():
                p.requires_grad_(False)
            self._screen_base = model.base_model
        return self._screen_base

    @torch.no_grad()
    def screen(
        self, prefix: Prefix, candidates: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """MSE (B,) of each candidate's bfloat16 state against ``target``: an ordering only."""
        self._screener()
        if prefix.kv is not None and prefix.screen_kv is None:
            # The committed prefix's float32 cache, rounded once: a prefix cache the bfloat16
            # copy computed itself carries the attention sink's rounding into every later
            # state (SmolLM2, random tokens: position 1's true token screened at 78% of the
            # state's mean square, behind 3,377 others; from the rounded cache at 1%, 69th).
            prefix.screen_kv = [(k.bfloat16(), v.bfloat16()) for k, v in prefix.kv]
        batch = int(candidates.numel())
        states, _ = self._step(prefix, batch, input_ids=candidates, screen=True)
        return (states - target.to(states.device).reshape(1, -1)).pow(2).mean(dim=-1)

    def extend(self, prefix: Prefix, token: int, cache: Any = None, row: int = 0) -> Prefix:
        """The prefix with ``token`` appended, reusing row ``row`` of a verification cache."""
        if cache is None:
            with torch.no_grad():
                _, cache = self._step(prefix, 1, input_ids=torch.tensor([token]), keep_cache=True)
            row = 0
        kv = [
            (layer.keys[row : row + 1].clone(), layer.values[row : row + 1].clone())
            for layer in cache.layers
        ]
        return Prefix(ids=[*prefix.ids, int(token)], kv=kv)

    def state_for_embedding(self, prefix: Prefix, embedding: torch.Tensor) -> torch.Tensor:
        """State (d,) at the next position for a continuous input vector (differentiable)."""
        states, _ = self._step(prefix, 1, inputs_embeds=embedding)
        return states[0]

    def prior_head(self) -> PriorHead | None:
        """The output layer for last-layer states; None for other layers or headless models."""
        if self.layer != -1 or self.source != "hidden":
            return None
        head = self.model.get_output_embeddings()
        if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
            return None
        weight = head.weight.detach()
        tied = weight.data_ptr() == self.embedding.data_ptr() or (
            weight.shape == self.embedding.shape and bool(torch.equal(weight, self.embedding))
        )
        bias = getattr(head, "bias", None)
        return PriorHead(
            weight=weight.float(),
            bias=None if bias is None else bias.detach().float(),
            tied=tied,
        )

    def prior_logprobs(self, states: torch.Tensor) -> torch.Tensor | None:
        """log p(next token | prefix) from last-layer states (T, d); None for other layers."""
        if self.layer != -1 or self.source != "hidden":
            return None
        head = self.model.get_output_embeddings()
        if head is None:
            return None
        with torch.no_grad():
            return torch.log_softmax(head(states.to(self.device)).float(), dim=-1)

    def duplicate_groups(self) -> dict[int, list[int]]:
        """Tokens whose input embeddings are bit-identical: no forward pass can tell them apart."""
        rows = self.embedding.float().cpu()
        keys: dict[bytes, list[int]] = {}
        for i in range(rows.shape[0]):
            keys.setdefault(rows[i].numpy().tobytes(), []).append(i)
        groups: dict[int, list[int]] = {}
        for members in keys.values():
            if len(members) > 1:
                for m in members:
                    groups[m] = [x for x in members if x != m]
        return groups
