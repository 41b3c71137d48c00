"""Veil's pure-Python privacy core.

No third-party dependencies and no I/O: the same files run in CPython >= 3.11 and
in Pyodide (Python 3.14) inside the browser extension.
"""

from __future__ import annotations

__version__ = "0.1.0"
