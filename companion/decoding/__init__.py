"""Privacy-aware decoding: the defenses, their generation loop and their receipts.

* :mod:`~companion.decoding.registry` -- the defenses, one line each; each lives in
  its own module under :mod:`~companion.decoding.defenses` (config, mechanism,
  guarantee).
* :mod:`~companion.decoding.base` -- the shape of a registry entry, the noise ledger
  and the helpers the defenses share.
* :mod:`~companion.decoding.generate` -- the generation loop; :mod:`~companion.decoding.receipt`
  -- the receipt of every answer.

Importing this package is cheap (names and configurations only); a defense's
module, the base and the loop import torch and transformers.
"""

from companion.decoding.config import DEFAULT_DEFENSE, DEFENSES, DefenseConfig

__all__ = ["DEFAULT_DEFENSE", "DEFENSES", "DefenseConfig"]
