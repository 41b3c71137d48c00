"""``veil keys create|list|revoke``: the owner's guest keys, straight from the key store.

The server need not run: the keys live in ``<veil home>/keys.sqlite3`` and a
running companion sees a new or revoked key on its next request.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from py_core.errors import InvalidParameterError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "keys", help="guest keys: chat over one collection with a fixed defense, no chunk text"
    )
    parser.add_argument("--home", type=Path, default=None, help="Veil home (default ~/.veil)")
    actions = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))

    create = actions.add_parser("create", help="create a key (shown once)")
    create.add_argument("--collection", required=True, help="the one collection it chats over")
    create.add_argument("--defense", required=True, help="its fixed decoding defense")
    create.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a defense parameter (repeatable), e.g. --param epsilon=4",
    )
    create.add_argument(
        "--budget", type=float, default=None, help="lifetime epsilon cap (formal defenses only)"
    )
    create.add_argument(
        "--expires", default=None, help="a duration (30d, 12h, 90m, 2w) or an ISO date"
    )
    create.add_argument(
        "--allow-titles",
        action="store_true",
        help="answers name the cited documents (default: only how many)",
    )
    create.add_argument("--label", default="", help="who or what the key is for")
    create.add_argument(
        "--no-check-collection",
        action="store_true",
        help="do not check that the collection exists in the document store",
    )
    create.add_argument("--store", type=Path, default=None, help="document store (SQLite) path")
    create.set_defaults(func=_create)

    listing = actions.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--json", action="store_true", help="JSON instead of a table")
    listing.set_defaults(func=_list)

    revoke = actions.add_parser("revoke", help="revoke a key at once")
    revoke.add_argument("id", type=int, help="the key's id (see 'veil keys list')")
    revoke.set_defaults(func=_revoke)


def _store(args: argparse.Namespace) -> Any:
    from companion.keys import KeyStore, keys_path
    from companion.settings import Settings

    home = args.home or Settings().resolved_home()
    return KeyStore(keys_path(home))


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare string


def parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidParameterError(f"--param needs NAME=VALUE; got {item!r}")
        params[name.strip()] = _value(value.strip())
    return params


def _check_collection(args: argparse.Namespace) -> None:
    from companion.rag.store import DocumentStore, validate_collection_name
    from companion.settings import Settings

    validate_collection_name(args.collection)
    settings = Settings(home=args.home) if args.home else Settings()
    path = args.store or settings.resolved_store_path()
    if not Path(path).exists():
        raise InvalidParameterError(
            f"there is no document store at {path}; ingest documents first "
            f"(veil ingest FILES --collection {args.collection}) or pass --no-check-collection"
        )
    store = DocumentStore(path)
    try:
        names = {c["name"] for c in store.collections()}
    finally:
        store.close()
    if args.collection not in names:
        raise InvalidParameterError(
            f"no collection named {args.collection!r} in {path} (have: "
            f"{', '.join(sorted(names)) or 'none'}); or pass --no-check-collection"
        )


def _create(args: argparse.Namespace) -> int:
    from companion.keys import parse_expiry

    params = parse_params(args.param)
    expires = parse_expiry(args.expires)
    if not args.no_check_collection:
        _check_collection(args)
    key, raw = _store(args).create(
        collection=args.collection,
        defense=args.defense,
        params=params,
        budget=args.budget,
        expires=expires,
        allow_titles=args.allow_titles,
        label=args.label,
    )
    print(raw)
    print(
        f"guest key {key.id} for collection {key.collection!r}, defense {key.defense!r}"
        + (f", budget epsilon {key.budget:g}" if key.budget is not None else "")
        + (f", expires {_when(key.expires)}" if key.expires is not None else "")
        + ("; answers name the cited documents" if key.allow_titles else "")
        + ". The key is shown only now: give it to the guest as their API key.",
    )
    return 0


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp)) + "Z"


def _list(args: argparse.Namespace) -> int:
    keys = _store(args).list_keys()
    if args.json:
        print(json.dumps([k.to_dict() for k in keys], indent=1))
        return 0
    if not keys:
        print("no guest keys yet (veil keys create --collection NAME --defense DEFENSE)")
        return 0
    rows = [("id", "status", "collection", "defense", "budget", "spent", "expires", "label")]
    for k in keys:
        rows.append(
            (
                str(k.id),
                k.status(),
                k.collection,
                k.defense,
                "-" if k.budget is None else f"{k.budget:g}",
                f"{k.spent:.4g}",
                _when(k.expires),
                k.label,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _revoke(args: argparse.Namespace) -> int:
    key = _store(args).revoke(args.id)
    if key is None:
        raise InvalidParameterError(f"no guest key with id {args.id} (see 'veil keys list')")
    print(f"guest key {key.id} revoked; requests with it are refused from now on")
    return 0
