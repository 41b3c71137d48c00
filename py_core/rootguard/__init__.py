"""RootGuard: sanitize each private root value once, derive everything else from it.

Method: docs/methods/rootguard.md.  The pieces:

* :mod:`~py_core.rootguard.profile` -- the person's values as data (roots with
  public domains, derived formulas), validated all at once;
* :mod:`~py_core.rootguard.expr` -- the safe formula evaluator (``ast``, whitelist);
* :mod:`~py_core.rootguard.formulas` -- built-in clinical formulas with risk classes;
* :mod:`~py_core.rootguard.mechanism` -- the exact clamped discrete Laplace on a grid;
* :mod:`~py_core.rootguard.allocation` -- equal or sensitivity-weighted budget split;
* :mod:`~py_core.rootguard.cache` -- the noisy-root cache, ledger and JSON state;
* :mod:`~py_core.rootguard.text` -- finding and replacing the values in free text
  (:mod:`~py_core.rootguard.patterns`: what it reads, as patterns);
* :mod:`~py_core.rootguard.baselines` -- M-All / M-Roots / M-Opt and the MAP adversary;
* :mod:`~py_core.rootguard.default_profile` -- the default adult profile (data);
* :mod:`~py_core.rootguard.api` -- the JSON-in/JSON-out facade the extension calls.
"""

from __future__ import annotations

from py_core.rootguard.allocation import allocate, sensitivities
from py_core.rootguard.cache import RootCache
from py_core.rootguard.expr import Expression, parse_expression
from py_core.rootguard.formulas import FORMULAS, Formula, RiskClasses
from py_core.rootguard.mechanism import DiscreteLaplaceMechanism, Grid, discrete_laplace
from py_core.rootguard.profile import Profile, load_profile

__all__ = [
    "FORMULAS",
    "DiscreteLaplaceMechanism",
    "Expression",
    "Formula",
    "Grid",
    "Profile",
    "RiskClasses",
    "RootCache",
    "allocate",
    "discrete_laplace",
    "load_profile",
    "parse_expression",
    "sensitivities",
]
