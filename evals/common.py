"""The contract every evaluation follows, and the helpers they share.

An evaluation is a package under :mod:`evals` registered in
``evals.cli.EVALUATIONS``.  Its ``__init__`` stays light (no torch
at import) and defines:

* ``SMOKE`` and ``FULL``: frozen dataclass instances of its configuration, with a
  ``smoke`` field (``SMOKE.smoke`` is true).  ``--smoke`` picks ``SMOKE``; the
  evaluation's own options may override fields of the chosen one.
* ``add_arguments(parser)``: its own options only; :func:`add_contract_arguments`
  adds ``--out`` (required), ``--smoke`` and ``--render-only`` to every one.
* ``evaluate(args, config) -> Path``: run, write ``OUT/results.json``,
  ``OUT/report.md`` and the plots, and return the report's path.
* ``render(out) -> Path``: re-render ``OUT/report.md`` and the plots from
  ``OUT/results.json`` without running anything.

Reports name models by identity (:func:`model_identity`: file name and sha256 of
the weights), never by where they were found, and describe the machine with
:func:`environment`, which holds no path either.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import hashlib
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from py_core.errors import InvalidParameterError

REPORT = "report.md"
RESULTS = "results.json"
RENDER_FLAG = "--render-only"
ROOT = Path(__file__).resolve().parents[1]


class Evaluation(Protocol):
    """What ``veil eval NAME`` needs of an evaluation module."""

    SMOKE: Any
    FULL: Any

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def evaluate(self, args: argparse.Namespace, config: Any) -> Path: ...

    def render(self, out: Path) -> Path: ...


# -- the command line ------------------------------------------------------------


def add_contract_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` (required), ``--smoke`` and ``--render-only``, the same for every evaluation."""
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help=f"folder for {REPORT}, {RESULTS} and the plots (the committed ones are docs/NAME)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the small smoke configuration (what CI runs)"
    )
    parser.add_argument(
        RENDER_FLAG,
        action="store_true",
        dest="render_only",
        help=f"re-render OUT/{REPORT} and the plots from OUT/{RESULTS} without re-running",
    )


def main(evaluation: Evaluation, args: argparse.Namespace) -> int:
    """Run ``evaluation`` (or only re-render it) as the parsed ``args`` ask."""
    out = Path(args.out)
    if args.render_only:
        path = evaluation.render(out)
    else:
        path = evaluation.evaluate(args, evaluation.SMOKE if args.smoke else evaluation.FULL)
    print(f"wrote {path}")
    return 0


def config_for(args: argparse.Namespace, base: Any, fields: Iterable[str]) -> Any:
    """``base`` with each of ``fields`` that ``args`` sets (not None) replaced."""
    changes = {f: getattr(args, f) for f in fields if getattr(args, f, None) is not None}
    return dataclasses.replace(base, **changes)


def command(name: str, out: Path, *options: str, smoke: bool = False) -> str:
    """The command that regenerates a report, with ``--out`` shown without this machine's paths."""
    parts = ["veil", "eval", name, "--out", display_path(out), *options]
    if smoke:
        parts.append("--smoke")
    return " ".join(parts)


def display_path(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it, else ``DIR``."""
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return "DIR"


# -- results.json ------------------------------------------------------------------


def write_results(out: Path, data: Any, *, indent: int = 1) -> Path:
    """Write ``data`` to ``OUT/results.json`` (numpy scalars as floats; NaN kept as NaN)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS
    path.write_text(json.dumps(data, indent=indent, default=float) + "\n", encoding="utf-8")
    return path


def read_results(out: Path) -> Any:
    """``OUT/results.json``, or a clear error naming what is missing."""
    path = out / RESULTS
    if not path.is_file():
        raise InvalidParameterError(
            f"{RENDER_FLAG} needs {display_path(path)} from an earlier run; "
            f"no {RESULTS} in {display_path(out)}"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def write_report(out: Path, text: str) -> Path:
    """Write ``OUT/report.md``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT
    path.write_text(text, encoding="utf-8")
    return path


# -- tables and plots ----------------------------------------------------------------


def report_with_goals(
    results: Any,
    out: Path,
    write: Callable[[Any, Path], Path],
    goals: Callable[[Any], list[str]],
    *,
    echo: bool = True,
) -> Path:
    """Add the goal notes to ``results``, write its report with ``write``; print the notes."""
    results.notes.extend(goals(results))
    path = write(results, out)
    if echo:
        for note in results.notes:
            print(f"- {note}")
    return path


def markdown_table(headers: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub Markdown table (no trailing newline)."""
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out: Path, name: str, *, dpi: int = 120) -> str:
    """Lay out, save as ``OUT/name`` and close ``fig``; return ``name`` for the report."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=dpi)
    pyplot().close(fig)
    return name


# -- where things come from ------------------------------------------------------------


def packaged_file(package: str, relative: str, *, install: str | None = None) -> Path:
    """A data file shipped inside an installed ``package`` (a wheel's data, not ours)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        hint = install or "install the eval extra: pip install -e '.[eval]'"
        raise InvalidParameterError(f"{package} is not installed; {hint}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        raise InvalidParameterError(f"the installed {package} does not ship {relative}")
    return path


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def model_identity(path: str | Path, *, name: str | None = None) -> dict[str, str]:
    """``{"name", "sha256"}`` of a model: ``name`` (default: the file's or folder's name)
    and the sha256 of its weights file.

    A folder with several weight files is hashed over their hashes in name order.  The
    hash is cached per file, size and modification time, so asking twice costs one read.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in WEIGHT_SUFFIXES and f.is_file())
        if not files:
            raise InvalidParameterError(f"model folder {p.name!r} has no weight files")
    elif p.is_file():
        files = [p]
    else:
        raise InvalidParameterError(f"no model at {p.name!r}")
    hashes = [_sha256_of(f) for f in files]
    if len(hashes) == 1:
        return {"name": name or p.name, "sha256": hashes[0]}
    combined = hashlib.sha256(b"".join(bytes.fromhex(h) for h in hashes)).hexdigest()
    return {"name": name or p.name, "sha256": combined}


def _sha256_of(path: Path) -> str:
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe_model(identity: dict[str, str] | None) -> str:
    """``name`` (sha256 ``…``) for a report."""
    if not identity:
        return "-"
    return f"`{identity['name']}` (sha256 `{identity['sha256']}`)"


# -- the machine -----------------------------------------------------------------------


def environment(*, device: str | None = None) -> dict[str, Any]:
    """Python and torch versions, CPU, threads, git commit and start time; no paths."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": _version("torch"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpu_cores": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "torch_threads": None,
        "device": device,
        "git_commit": None,
        "git_dirty": None,
        "started": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch_threads"] = torch.get_num_threads()
    env["git_commit"], env["git_dirty"] = _git_state()
    return env


def describe_environment(env: dict[str, Any] | None) -> str:
    """One line for a report: versions, machine, threads, commit, start time ("" if none)."""
    if not env:
        return ""
    parts = []
    versions = f"Python {env['python']}" if env.get("python") else ""
    if env.get("torch"):
        versions += f", torch {env['torch']}"
    if versions:
        parts.append(versions.lstrip(", "))
    machine = env.get("machine") or ""
    if env.get("cpu_cores"):
        machine += f", {env['cpu_cores']} CPU cores"
        if env.get("load_average") is not None:
            machine += f" (load average {env['load_average']:.1f} at start)"
    if env.get("torch_threads"):
        machine += f", torch threads {env['torch_threads']}"
    if env.get("device"):
        machine += f", device {env['device']}"
    if env.get("llamacpp"):
        machine += f", llama.cpp: {env['llamacpp']}"
    if machine:
        parts.append(machine.lstrip(", "))
    if env.get("git_commit"):
        parts.append(
            f"commit {env['git_commit'][:12]}" + (" with local changes" if env["git_dirty"] else "")
        )
    if env.get("started"):
        parts.append(f"started {env['started']}")
    return "; ".join(parts)


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_state() -> tuple[str | None, bool | None]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return commit.stdout.strip() or None, dirty


# -- numbers ---------------------------------------------------------------------------


def nan_to_none(value: Any) -> Any:
    """``value`` with every float NaN (in nested dicts and lists) replaced by None."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nan_to_none(v) for v in value]
    return value


def find_row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    """The first result row whose fields equal ``match`` (None if there is none)."""
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)
