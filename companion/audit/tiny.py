"""A tiny randomly initialised causal LM with its own small tokenizer, saved to a folder.

Used by the fast tests and by ``veil eval inversion --smoke``: it loads through
:func:`companion.models.load_causal_lm` like any local model, builds in well under
a second and needs no download.  Given a real model's tokenizer instead, it has that
vocabulary (``veil eval audit-models --smoke`` runs one with the served default's
152 k-token Qwen vocabulary, so the large-vocabulary paths run in CI).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRAINING_TEXT = (
    "The quick brown fox jumps over the lazy dog. Patients were given 5 mg of the drug "
    "twice a day. The prime minister said on Tuesday that the bushfires near Sydney had "
    "forced hundreds of people from their homes. def main(argv): return 0 if argv else 1. "
    "Alice Smith, born 1984, lives at 12 Baker Street; her e-mail is alice@example.org."
)


def make_tiny_model(
    folder: Path,
    *,
    arch: str = "llama",
    vocab_size: int = 320,
    seed: int = 0,
    tokenizer: Any = None,
) -> Path:
    """Write a tiny ``arch`` ('llama' or 'gpt2') model and tokenizer into ``folder``: a
    byte-level BPE of ``vocab_size`` trained here, or ``tokenizer`` (a real model's)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    folder.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            [TRAINING_TEXT] * 4,
            vocab_size=vocab_size,
            min_frequency=1,
            special_tokens=["<|endoftext|>"],
        )
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    vocab = len(tokenizer)
    eos = int(tokenizer.eos_token_id or 0)
    config: Any
    model: Any
    torch.manual_seed(seed)
    if arch == "llama":
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            eos_token_id=eos,
            bos_token_id=eos,
        )
        model = LlamaForCausalLM(config)
    elif arch == "gpt2":
        config = GPT2Config(
            vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=256, eos_token_id=eos
        )
        model = GPT2LMHeadModel(config)
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}; use 'llama' or 'gpt2'")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
