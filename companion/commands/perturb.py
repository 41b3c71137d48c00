"""``veil perturb``: print the k-RR-perturbed text to send, optionally with its receipt."""

from __future__ import annotations

import argparse
import json
import random
import sys

from py_core.errors import InvalidParameterError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "perturb",
        help="perturb a prompt with character-level k-RR",
        description="Perturb a prompt with character-level k-ary randomized response and "
        "print the text to send (restoration header included unless --no-header).",
    )
    parser.add_argument("file", nargs="?", help="text file to read (default: standard input)")
    parser.add_argument("--epsilon", "-e", required=True, type=float, help="epsilon per character")
    parser.add_argument("--receipt", action="store_true", help="print the receipt as JSON instead")
    parser.add_argument("--no-header", action="store_true", help="omit the restoration header")
    parser.add_argument("--header", help="use this restoration header instead of the default")
    parser.add_argument("--delta", type=float, default=1e-6, help="delta for the composed bound")
    parser.add_argument("--seed", type=int, help="seed (needs --insecure-seed; experiments only)")
    parser.add_argument(
        "--insecure-seed",
        action="store_true",
        help="allow --seed: the output becomes reproducible and must not protect real data",
    )
    parser.set_defaults(func=run)


def _read(path: str | None) -> str:
    if path is None or path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InvalidParameterError(f"no such file: {path!r}") from None
    except UnicodeDecodeError:
        raise InvalidParameterError(f"{path!r} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidParameterError(f"cannot read {path!r}: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from py_core.sanitize import DEFAULT_HEADER, sanitize_prompt

    rng = None
    if args.seed is not None:
        if not args.insecure_seed:
            raise InvalidParameterError(
                "--seed makes the noise reproducible; add --insecure-seed to confirm this is "
                "an experiment, not real data"
            )
        print("veil: warning: seeded, reproducible noise — not for real data", file=sys.stderr)
        rng = random.Random(args.seed)
    elif args.insecure_seed:
        raise InvalidParameterError("--insecure-seed needs --seed N")
    header = (
        None if args.no_header else (args.header if args.header is not None else DEFAULT_HEADER)
    )
    result = sanitize_prompt(
        _read(args.file),
        args.epsilon,
        header=header,
        rng=rng,
        secure=rng is None,
        delta=args.delta,
    )
    if args.receipt:
        json.dump(result.receipt.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.text)
    return 0
