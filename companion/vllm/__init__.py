"""The companion's answers on a vLLM engine (``veil serve --engine vllm``).

vLLM pins its own torch, transformers and fastapi, so it runs in a virtual
environment of its own (``scripts/setup.sh --vllm``) as a server the companion
starts (:mod:`companion.vllm.server`) or one a clinic already runs with Veil's
logits processor loaded.  The pieces:

- :mod:`companion.vllm.request` -- what one answer asks of the engine (the defense,
  its inputs, the noise key), sent as one ``vllm_xargs`` value; shared by both sides.
- :mod:`companion.vllm.rows` -- the per-request work inside vLLM's sampler: the
  same defense mechanism, repetition penalty and CSPRNG token choice as the
  in-process loop, one noise record per token on a ledger the companion reads.
- :mod:`companion.vllm.processor` -- the ``vllm.v1`` batch-level ``LogitsProcessor``
  that hands vLLM's batch to :mod:`~companion.vllm.rows` (imported only inside vLLM).
- :mod:`companion.vllm.engine` -- the companion side: the engine behind the API
  (many answers at once), streaming each answer and building its receipt from the
  ledger, releasing no token whose noise record is missing.

docs/methods/engines.md says which defenses run on vLLM and why the others do not.
"""
