"""``veil eval NAME``: run one of the evaluations in :mod:`evals`."""

from __future__ import annotations

import argparse
import importlib

# name -> module in evals/ exposing add_arguments(parser) and run(args) -> int.
EVALUATIONS: dict[str, str] = {
    "inversion": "evals.inversion",
    "rootguard": "evals.rootguard",
    "krr": "evals.krr",
    "pad": "evals.pad",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="run an evaluation and write its report")
    names = parser.add_subparsers(dest="evaluation", required=True)
    for name, module_name in EVALUATIONS.items():
        module = importlib.import_module(module_name)
        sub = names.add_parser(name, help=(module.__doc__ or name).strip().splitlines()[0])
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
