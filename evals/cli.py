"""``veil eval NAME``: run one of the evaluations in :mod:`evals`.

The command belongs to the evaluations, not to the companion: it reaches ``veil`` as a
plug-in (the ``veil.commands`` entry point in pyproject.toml, loaded by
:func:`companion.cli.build_parser`), so the product never imports :mod:`evals`.

Every evaluation follows the contract of :mod:`evals.common`: ``--out`` is
required, ``--smoke`` picks its smoke configuration, ``--render-only``
re-renders ``OUT/report.md`` from ``OUT/results.json``.
"""

from __future__ import annotations

import argparse
import functools
import importlib

from evals import common

# name -> evaluation package in evals/ (see evals.common.Evaluation).
EVALUATIONS: dict[str, str] = {
    "inversion": "evals.inversion",
    "audit-models": "evals.audit_models",
    "rootguard": "evals.rootguard",
    "krr": "evals.krr",
    "scripts": "evals.scripts",
    "accents": "evals.accents",
    "pad": "evals.pad",
    "dprag": "evals.dprag",
    "rag": "evals.rag",
    "answers": "evals.answers",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="run an evaluation and write its report")
    names = parser.add_subparsers(dest="evaluation", required=True)
    for name, module_name in EVALUATIONS.items():
        module = importlib.import_module(module_name)
        sub = names.add_parser(name, help=(module.__doc__ or name).strip().splitlines()[0])
        common.add_contract_arguments(sub)
        module.add_arguments(sub)
        sub.set_defaults(func=functools.partial(common.main, module))
