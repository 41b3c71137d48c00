"""Local retrieval: ingest, chunking, embeddings and the SQLite store."""
