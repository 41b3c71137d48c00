"""The ``veil`` command line.

Each subcommand lives in its own module under :mod:`companion.commands` and
exposes ``register(subparsers)``; heavy imports (torch, transformers) happen only
inside the handler, so ``veil perturb`` starts in milliseconds.

Commands from other installed packages come in through the ``veil.commands`` entry
point group (``veil eval`` from :mod:`evals.cli`): a callable ``register(subparsers)``.

Errors Veil raises on purpose (:class:`py_core.errors.VeilError`) become a
one-line message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from py_core.errors import VeilError

# One line per subcommand module; each defines register(subparsers).
COMMAND_MODULES = (
    "companion.commands.perturb",
    "companion.commands.audit",
    "companion.commands.serve",
    "companion.commands.ingest",
    "companion.commands.keys",
    "companion.commands.mcp",
    "companion.commands.rootguard",
    "companion.commands.models",
)


PLUGIN_GROUP = "veil.commands"  # other packages' subcommands: register(subparsers)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"veil: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="veil", description="Veil: differential privacy for LLM users.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        entry.load()(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except VeilError as exc:
        # One line, even for errors that list their problems one per line.
        message = " ".join(line.strip() for line in str(exc).splitlines())
        print(f"veil: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("veil: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
