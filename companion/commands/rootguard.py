"""``veil rootguard``: the person's one RootGuard record, shared with the extension.

* ``init --values FILE [--profile FILE] [--state FILE]`` -- create the record:
  each root with a true value is sanitized once (or, with ``--state``, the state
  ``veil perturb`` already keeps is adopted: nothing is drawn again).
* ``import FILE`` -- take the record exported from the extension's options page
  (or by ``export``).  Refused, with every reason, when it conflicts with the
  record here (another profile, other true values, other draws); taken when it
  is the same or extends this one.  ``--replace`` replaces on purpose (the old
  file is kept as ``.bak``).
* ``export FILE`` -- write the record for the extension (``-``: stdout).  It holds
  the true values: keep it private.
* ``show`` -- the noisy values, ε per root and the ledger (never the true values).

Everything is in ``<veil home>/rootguard.json`` unless ``--record FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from py_core.errors import InvalidParameterError, StateError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rootguard",
        help="the person's RootGuard record: init, import/export (with the extension), show",
        description="One RootGuard record (profile, true values, noisy values, ledger) for the "
        "companion, 'veil mcp' and, by import/export, the extension.",
    )
    sub = parser.add_subparsers(dest="rootguard_command", required=True)
    init = sub.add_parser("init", help="create the record from your true values")
    init.add_argument("--values", required=True, metavar="FILE", help='JSON {"name": number}')
    init.add_argument("--profile", metavar="FILE", help="JSON profile (default: the adult one)")
    init.add_argument(
        "--state", metavar="FILE", help="adopt this existing state (from veil perturb --state)"
    )
    imp = sub.add_parser("import", help="take the record exported from the extension")
    imp.add_argument("file", help="the exported JSON ('-': standard input)")
    imp.add_argument(
        "--replace",
        action="store_true",
        help="replace a conflicting record on purpose (kept as .bak; services that saw both "
        "draws can combine them)",
    )
    exp = sub.add_parser("export", help="write the record for the extension's options page")
    exp.add_argument("file", help="where to write it ('-': standard output); it holds true values")
    show = sub.add_parser("show", help="noisy values, ε and ledger (no true values)")
    for p in (init, imp, exp, show):
        p.add_argument("--record", metavar="FILE", help="default: <veil home>/rootguard.json")
    init.set_defaults(func=run_init)
    imp.set_defaults(func=run_import)
    exp.set_defaults(func=run_export)
    show.set_defaults(func=run_show)


def _store(args: argparse.Namespace) -> Any:
    from companion.mcp.record import RecordStore, record_path
    from companion.settings import veil_home

    return RecordStore(Path(args.record) if args.record else record_path(veil_home()))


def _read_json(path: str, what: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidParameterError(f"no such file: {path!r}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(f"cannot read {what} {path!r}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidParameterError(f"{what} {path!r} is not JSON: {exc}") from None


def run_init(args: argparse.Namespace) -> int:
    from companion.mcp.record import Record, parse_record
    from py_core.rootguard import api

    store = _store(args)
    profile = api.DEFAULT_PROFILE if args.profile is None else _read_json(args.profile, "profile")
    values = _read_json(args.values, "the values file")
    if not isinstance(values, dict):
        raise InvalidParameterError(f"the values file {args.values!r} must hold a JSON object")
    if args.state is not None:
        state = _read_json(args.state, "the state")
        event, reason = "adopted", f"state of {Path(args.state).name}"
    else:
        problems = api.validate_profile(profile)
        if problems:
            raise InvalidParameterError("the profile has problems: " + "; ".join(problems))
        state = api.init_state(profile, {k: v for k, v in values.items() if v is not None})
        event, reason = "initialised", "veil rootguard init"
    record = parse_record(
        {"profile": profile, "trueValues": values, "state": state}, "the new record"
    )
    store.create(
        Record(record.profile, record.true_values, record.state).with_state(
            record.state, event, reason
        )
    )
    print(
        f"veil: RootGuard record created in {store.path}: {len(state['roots'])} value(s) "
        "sanitized once; keep this file (a new one draws new noise and spends budget again)",
        file=sys.stderr,
    )
    return 0


def run_import(args: argparse.Namespace) -> int:
    from companion.mcp.record import compare_records, parse_record

    store = _store(args)
    incoming = parse_record(_read_json(args.file, "the export"), repr(args.file))
    here = store.read()
    if here is None:
        store.create(incoming.with_state(incoming.state, "imported", f"from {args.file}"))
        print(f"veil: RootGuard record imported into {store.path}", file=sys.stderr)
        return 0
    relation, reasons = compare_records(here, incoming)
    if relation == "same":
        print(f"veil: {store.path} already holds this record; nothing changed", file=sys.stderr)
        return 0
    if relation == "extends" or args.replace:
        store.replace_with(incoming.with_state(incoming.state, "imported", f"from {args.file}"))
        what = "extends" if relation == "extends" else "replaced (the old one is in .bak)"
        print(f"veil: RootGuard record {what}: {store.path}", file=sys.stderr)
        return 0
    raise StateError(
        f"{args.file!r} does not match the record in {store.path}, so it was not imported and "
        "nothing was merged: " + "; ".join(reasons) + ". Export this record to the extension "
        "instead ('veil rootguard export'), or use --replace to replace it on purpose"
    )


def run_export(args: argparse.Namespace) -> int:
    store = _store(args)
    record = store.require()
    text = json.dumps(record.to_json(), indent=1) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
        return 0
    target = Path(args.file)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(
        f"veil: RootGuard record written to {target} (it holds your true values; import it "
        "on the extension's options page, then delete it)",
        file=sys.stderr,
    )
    return 0


def run_show(args: argparse.Namespace) -> int:
    from companion.mcp.guard import Guard
    from py_core.rootguard import api

    out = Guard(_store(args)).list_values()
    record = _store(args).require()
    out["ledger"] = record.state.get("ledger", [])
    # ε in words that cannot be misread: per privacy unit with its unit, and over the domain.
    described = api.describe(record.profile)
    out["epsilon_in_words"] = {
        "total": described["total_label"],
        "spent": api.spent(record.profile, record.state)["label"],
        "roots": {
            name: f"{info['label']}; {info['domain_label']}"
            for name, info in described["roots"].items()
        },
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0
