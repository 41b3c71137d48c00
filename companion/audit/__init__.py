"""The hidden-state inversion auditor: how much of a text can a model's hidden states reveal?

* :mod:`companion.audit.hidden` -- hidden states and exact verification with a prefix KV cache;
* :mod:`companion.audit.ranker` -- the per-model setup (position-0 table, ranker), cached on disk;
* :mod:`companion.audit.invert` -- the fast exact path and the published gradient method;
* :mod:`companion.audit.inputs` -- leaked states from .pt/.npy/.safetensors, validated;
* :mod:`companion.audit.service` and :mod:`companion.audit.jobs` -- what the CLI and API share.

Heavy imports (torch, transformers) happen in those modules, not here.
"""
