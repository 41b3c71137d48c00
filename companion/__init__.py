"""Veil's local companion: RAG chat with privacy-aware decoding, the inversion
auditor, and the ``veil`` command line.

Importing this package is cheap: torch and transformers are imported only by the
modules that need them.
"""
