"""``veil models``: list the chat models the companion can load, pull one from the hub."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from companion.settings import veil_home


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list chat models; pull one from the hub")
    actions = parser.add_subparsers(dest="models_command", required=True)

    listing = actions.add_parser("list", help="every model the companion can load")
    listing.add_argument("--home", type=Path, default=None, help="Veil's folder (~/.veil)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_list)

    pull = actions.add_parser(
        "pull",
        help="fetch a model from the Hugging Face hub into <home>/models (resumable, checksummed)",
        description="Fetch OWNER/NAME from the Hugging Face hub ($HF_ENDPOINT, or --endpoint) "
        "into <home>/models/NAME. An interrupted pull resumes where it stopped; every LFS file's "
        "SHA-256 must match the hub's, or the pull is refused. The model is listed by "
        "GET /v1/models once complete.",
    )
    pull.add_argument("repo", help="the hub's name for it, e.g. Qwen/Qwen2.5-0.5B-Instruct")
    pull.add_argument("--revision", default="main", help="branch, tag or commit (main)")
    pull.add_argument("--name", default=None, help="local folder name (default: NAME)")
    pull.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATTERN",
        help="fetch only files matching PATTERN (repeatable; e.g. '*Q4_K_M.gguf')",
    )
    pull.add_argument("--exclude", action="append", default=[], metavar="PATTERN")
    pull.add_argument("--endpoint", default=None, help="hub URL (default: $HF_ENDPOINT)")
    pull.add_argument("--home", type=Path, default=None, help="Veil's folder (~/.veil)")
    pull.set_defaults(func=_pull)


def _list(args: argparse.Namespace) -> int:
    from companion.models import model_catalog

    entries = model_catalog(home=args.home or veil_home())
    if args.json:
        print(json.dumps([e.to_dict(owner=True) for e in entries], indent=1))
        return 0
    for entry in entries:
        print(f"{entry.id}\t{entry.source}\t{entry.format}\t{entry.description}")
    return 0


def _pull(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from companion.hub import pull

    result = pull(
        args.repo,
        home=args.home or veil_home(),
        revision=args.revision,
        name=args.name,
        include=args.include,
        exclude=args.exclude,
        endpoint=args.endpoint,
        tqdm_class=tqdm,
        say=print,
    )
    fetched = result.downloaded_bytes / 1e6
    resumed = f", {result.resumed_bytes / 1e6:.1f} MB resumed" if result.resumed_bytes else ""
    print(
        f"pulled {result.repo}@{result.commit[:12]} into {result.folder} "
        f"({fetched:.1f} MB fetched{resumed}; SHA-256 checked for "
        f"{sum(1 for f in result.files if f.sha256)} of {len(result.files)} files)"
    )
    print(f"use it: veil serve --model {result.name}, or pick it on the page")
    return 0
