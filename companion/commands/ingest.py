"""``veil ingest PATH...``: add documents to the companion's local store."""

from __future__ import annotations

import argparse
from pathlib import Path

from py_core.errors import InvalidParameterError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest", help="add .txt/.md/.html/.eml/.pdf files (or folders) to the document store"
    )
    parser.add_argument("paths", nargs="+", type=Path, help="files or folders")
    parser.add_argument("--collection", default="default", help="collection name")
    parser.add_argument("--store", type=Path, default=None, help="SQLite store path")
    parser.set_defaults(func=_ingest)


def _files(paths: list[Path]) -> list[Path]:
    from companion.rag.ingest import SUPPORTED_SUFFIXES

    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
            )
        elif path.is_file():
            found.append(path)
        else:
            raise InvalidParameterError(f"{path}: no such file or folder")
    if not found:
        raise InvalidParameterError(
            "no supported files found (" + ", ".join(SUPPORTED_SUFFIXES) + ")"
        )
    return found


def _ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from companion.models import load_embedder
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore, validate_collection_name
    from companion.settings import Settings

    validate_collection_name(args.collection)
    files = _files(args.paths)
    settings = Settings()
    store = DocumentStore(args.store or settings.resolved_store_path())
    rag = RagService(store=store, embedder=load_embedder(settings.device))
    added = skipped = 0
    failed: list[str] = []
    try:
        with tqdm(total=len(files), unit="file", desc="ingest") as bar:
            for path in files:
                bar.set_postfix_str(path.name[:30])
                try:
                    _info, created = rag.ingest(path.name, path.read_bytes(), args.collection)
                except InvalidParameterError as exc:
                    failed.append(str(exc))
                else:
                    added += created
                    skipped += not created
                bar.update(1)
    finally:
        store.close()
    print(
        f"{added} added, {skipped} already in collection {args.collection!r}, "
        f"{len(failed)} failed; store: {store.path}"
    )
    for message in failed:
        print(f"  failed: {message}")
    return 1 if failed and not added and not skipped else 0
