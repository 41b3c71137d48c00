"""``veil perturb``: print the protected text to send, optionally with its receipt.

The protection is :func:`py_core.protect.protect`, as in the extension: ``--mode
text`` perturbs every character with k-RR; ``numbers`` replaces your declared
values by RootGuard's noisy values; ``both`` does both.  RootGuard's state lives
in the ``--state`` file: created on first use (each value with a true value
sanitized once), read and written back on every run, so a value is drawn once
and reused, never re-drawn silently.  The word memo lives in the ``--memo`` file
(:mod:`py_core.memo`): every word already sent is sent again as its stored draw,
new ones are added, and the file's lifetime ledger counts each release once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from py_core.accounting import DEFAULT_DELTA
from py_core.errors import InvalidParameterError
from py_core.protect import DEFAULT_MODE, HEADER_DEFAULT, HEADER_NONE, MODE_NAMES, MODES


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "perturb",
        help="protect a prompt (k-RR on the text, RootGuard on your numbers, or both)",
        description="Protect a prompt and print the text to send: --mode text perturbs every "
        "character with k-ary randomized response (restoration header included unless "
        "--no-header); --mode numbers replaces your values (--values) by RootGuard's cached "
        "noisy values, kept in --state; --mode both does both.",
    )
    parser.add_argument("file", nargs="?", help="text file to read (default: standard input)")
    parser.add_argument(
        "--mode",
        choices=MODE_NAMES,
        default=DEFAULT_MODE,
        help=f"what to protect (default: {DEFAULT_MODE})",
    )
    parser.add_argument(
        "--epsilon", "-e", type=float, help="epsilon per character (modes text and both)"
    )
    parser.add_argument(
        "--receipt",
        action="store_true",
        help="print the receipt as JSON instead (with RootGuard: {receipt, replacements})",
    )
    parser.add_argument("--no-header", action="store_true", help="omit the restoration header")
    parser.add_argument("--header", help="use this restoration header instead of the default")
    parser.add_argument(
        "--delta", type=float, default=DEFAULT_DELTA, help="delta for the composed bound"
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="RootGuard profile, JSON (default: RootGuard's default adult profile)",
    )
    parser.add_argument(
        "--values",
        metavar="FILE",
        help='your true values, JSON {"name": number} (modes numbers and both)',
    )
    parser.add_argument(
        "--state",
        metavar="FILE",
        help="RootGuard's state, JSON: read and written back; created if missing "
        "(modes numbers and both; keep it: a new one draws new noise and spends budget again)",
    )
    parser.add_argument(
        "--memo",
        metavar="FILE",
        help="the word memo, JSON: a word already sent is sent as its stored draw, new words "
        "are added; read and written back, created if missing (modes text and both)",
    )
    parser.add_argument("--seed", type=int, help="seed (needs --insecure-seed; experiments only)")
    parser.add_argument(
        "--insecure-seed",
        action="store_true",
        help="allow --seed for k-RR: the output becomes reproducible and must not protect real "
        "data (RootGuard always draws with a CSPRNG)",
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


def _read_json(path: str, what: str) -> dict[str, Any]:
    text = _read(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidParameterError(f"{what} {path!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidParameterError(f"{what} {path!r} must hold a JSON object")
    return data


def _write_json(path: str, data: Any) -> None:
    """Write ``data`` to ``path`` atomically: a crash leaves the old file or the new one."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        raise InvalidParameterError(f"cannot write {path!r}: {exc.strerror}") from None


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse flags the mode would ignore, and the files it needs but lacks."""
    mode = MODES[args.mode]
    rootguard_files = [
        flag for flag in ("profile", "values", "state") if getattr(args, flag) is not None
    ]
    if not mode.rootguard and rootguard_files:
        flags = ", ".join(f"--{flag}" for flag in rootguard_files)
        raise InvalidParameterError(f"{flags}: RootGuard's files are for --mode numbers or both")
    if mode.rootguard and (args.values is None or args.state is None):
        raise InvalidParameterError(
            f"--mode {args.mode} needs --values FILE (your true values) and --state FILE "
            "(where RootGuard keeps their noisy values)"
        )
    if mode.krr and args.epsilon is None:
        raise InvalidParameterError(f"--mode {args.mode} needs --epsilon/-e (per character)")
    if not mode.krr:
        ignored = [
            flag
            for flag, given in (
                ("--epsilon", args.epsilon is not None),
                ("--memo", args.memo is not None),
                ("--header", args.header is not None),
                ("--no-header", args.no_header),
                ("--seed", args.seed is not None),
            )
            if given
        ]
        if ignored:
            raise InvalidParameterError(
                f"{', '.join(ignored)}: no k-RR in --mode {args.mode}, so there is nothing to set"
            )
    if args.seed is not None and not args.insecure_seed:
        raise InvalidParameterError(
            "--seed makes the noise reproducible; add --insecure-seed to confirm this is "
            "an experiment, not real data"
        )
    if args.insecure_seed and args.seed is None:
        raise InvalidParameterError("--insecure-seed needs --seed N")


def _rootguard_setup(args: argparse.Namespace) -> tuple[Any, bool]:
    """The RootGuard setup from the files, and whether the state file is new."""
    from py_core.protect import RootGuardSetup
    from py_core.rootguard import api

    if args.profile is None:
        profile: dict[str, Any] = api.DEFAULT_PROFILE
    else:
        profile = _read_json(args.profile, "the profile")
    problems = api.validate_profile(profile)
    if problems:
        where = "RootGuard's default profile" if args.profile is None else repr(args.profile)
        raise InvalidParameterError(f"the profile {where} has problems: " + "; ".join(problems))
    values = _read_json(args.values, "the values file")
    created = not Path(args.state).exists()
    state = api.init_state(profile, values) if created else _read_json(args.state, "the state")
    return RootGuardSetup(profile=profile, state=state, true_values=values), created


MEMO_FORMAT = "veil.word_memo"


def _read_memo(path: str) -> tuple[dict[str, Any], Any]:
    """The memo file's ``(words, ledger)``; a new file starts empty."""
    if not Path(path).exists():
        return {}, None
    data = _read_json(path, "the word memo")
    if data.get("format") != MEMO_FORMAT or data.get("version") != 1:
        raise InvalidParameterError(
            f"{path!r} is not a Veil word memo (format {MEMO_FORMAT!r}, version 1)"
        )
    words = data.get("words")
    if not isinstance(words, dict):
        raise InvalidParameterError(f"the word memo {path!r} has no words object")
    return words, data.get("ledger")


def run(args: argparse.Namespace) -> int:
    from py_core.protect import SiteSettings, protect
    from py_core.sanitize import Receipt

    _check_flags(args)
    rng = None
    if args.seed is not None:
        print("veil: warning: seeded, reproducible noise — not for real data", file=sys.stderr)
        rng = random.Random(args.seed)
    text = _read(args.file)
    setup, created = _rootguard_setup(args) if MODES[args.mode].rootguard else (None, False)
    if args.no_header:
        header = HEADER_NONE
    else:
        header = HEADER_DEFAULT if args.header is None else args.header
    settings = SiteSettings(mode=args.mode, header=header, rootguard=setup)
    if args.epsilon is not None:  # numbers mode runs no k-RR and needs none
        settings = dataclasses.replace(settings, epsilon=args.epsilon)
    memo = None
    if args.memo is not None:
        from py_core import memo as word_memo

        words, ledger = _read_memo(args.memo)
        memo = word_memo.WordMemo(words)
    result = protect(text, settings, rng=rng, secure=rng is None, delta=args.delta, memo=memo)
    if memo is not None:
        # Saved before anything is printed: a draw that was shown is never re-drawn.
        for release in memo.added:
            words.setdefault(release["word"], []).append({**release["variant"], "sites": ["cli"]})
        ledger = word_memo.ledger_add(ledger, memo.added)
        _write_json(
            args.memo, {"format": MEMO_FORMAT, "version": 1, "words": words, "ledger": ledger}
        )
    if setup is not None and (created or result.state != setup.state):
        # Saved before anything is printed: a noisy value that was shown is never lost.
        _write_json(args.state, result.state)
        if created:
            print(
                f"veil: RootGuard: your values were sanitized once and saved in {args.state!r}; "
                "keep it (a new state draws new noise and spends budget again)",
                file=sys.stderr,
            )

    def receipt_dict(receipt: Receipt | None) -> dict[str, object] | None:
        return None if receipt is None else receipt.to_dict()

    if args.receipt:
        if setup is None:
            out: Any = receipt_dict(result.receipt)
        else:
            out = {
                "receipt": receipt_dict(result.receipt),
                "replacements": list(result.replacements),
            }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.text)
    return 0
