"""Evaluations that reproduce and extend the published results (``veil eval NAME``).

Each evaluation is a package that follows the contract in :mod:`evals.common`:
frozen ``SMOKE`` and ``FULL`` configurations, ``--out DIR`` required,
``--smoke`` for the fast run CI makes, ``--render-only`` to re-render
``DIR/report.md`` from ``DIR/results.json``; the report and its PNG plots go to
``DIR``.  The committed full reports are ``docs/NAME/report.md``.
"""
