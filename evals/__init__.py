"""Evaluations that reproduce and extend the published results (``veil eval NAME``).

Each evaluation module exposes ``add_arguments(parser)`` and ``run(args) -> int``,
has a fast ``--smoke`` mode that CI runs, and writes a Markdown report with PNG
plots to the folder given by ``--out``.
"""
