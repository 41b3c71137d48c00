"""The document store (:class:`DocumentStore`), split by job; every name it had is here.

* :mod:`.documents`: collections, documents and chunks (the store itself);
* :mod:`.vectors`: the vector indexes; :mod:`.lexical`: the FTS5 index;
* :mod:`.ledger`: the budget ledger; :mod:`.schema`: tables and numbered migrations;
* :mod:`.records`: what the store hands out (documents, hits).
"""

from __future__ import annotations

from companion.rag.store.documents import DocumentStore
from companion.rag.store.ledger import BudgetLedger, BudgetTransaction
from companion.rag.store.lexical import DEFAULT_FTS_TOKENIZER, FTS_SCHEMA, FTS_TOKENIZERS
from companion.rag.store.records import ChunkRow, DocumentInfo, Hit, validate_collection_name
from companion.rag.store.schema import MIGRATIONS, SCHEMA

__all__ = [
    "DEFAULT_FTS_TOKENIZER",
    "FTS_SCHEMA",
    "FTS_TOKENIZERS",
    "MIGRATIONS",
    "SCHEMA",
    "BudgetLedger",
    "BudgetTransaction",
    "ChunkRow",
    "DocumentInfo",
    "DocumentStore",
    "Hit",
    "validate_collection_name",
]
