"""Settings every test shares.

The companion serves Qwen2.5-Coder-1.5B by default where its wheels are installed and
SmolLM2-135M otherwise (companion.models.default_model); ``scripts/setup.sh --test`` does
not install the 1.5B.  The tests pin the served default to SmolLM2 so that what they
measure does not depend on which model wheels a machine has (a test of default_model
itself clears this).  Subprocesses (``veil serve`` in the end-to-end tests) inherit it.
"""

from __future__ import annotations

import os

os.environ.setdefault("VEIL_DEFAULT_MODEL", "smollm2-135m-instruct")
