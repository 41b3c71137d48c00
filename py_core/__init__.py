"""Veil's pure-Python privacy core.

No third-party dependencies: the same files run in CPython >= 3.11 and in
Pyodide (Python 3.14) inside the browser extension.  Mechanisms take their
randomness as an argument and do no I/O; the only files read are the data that
ships with the package (the word-frequency table, the preview calibration, the site
settings limits).
"""

from __future__ import annotations

__version__ = "0.1.0"
