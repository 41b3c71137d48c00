"""Structures inside a string argument: JSON, tables (CSV, TSV, Markdown) and SQL ``INSERT``.

Each is parsed and its cells or literals rewritten as fields named by their column, the
rest of the text as free text (:class:`companion.mcp.rewrite.Rewriter`, which mixes this
in).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from companion.mcp.edits import Rewrite, apply_edits, shift_spans
from py_core.rootguard.written import parse_single

if TYPE_CHECKING:
    from companion.mcp.guard import NoiseSource

_INSERT = re.compile(
    r"\binsert\s+(?:or\s+\w+\s+)?into\s+[\w.\"`\[\]]+\s*\((?P<cols>[^()]*)\)\s*values\s*",
    re.IGNORECASE,
)
_TABLE_DELIMITERS = (",", ";", "\t", "|")


class StructureRewrites:
    """The rewriter's methods for JSON, tables and SQL inside a string."""

    if TYPE_CHECKING:  # the rewriter's own, which these call

        def _walk(self, *args: Any, **kwargs: Any) -> Any: ...

        def _string(self, *args: Any, **kwargs: Any) -> str: ...

        def _text(self, *args: Any, **kwargs: Any) -> str: ...

        def field_value(self, key: str, description: str = "") -> str | None: ...

    def _json(
        self,
        value: str,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
        depth: int,
    ) -> str | None:
        stripped = value.strip()
        if stripped[:1] not in ("{", "[") or stripped[-1:] not in ("}", "]"):
            return None
        try:
            data = json.loads(stripped)
        except ValueError:
            return None
        out = self._walk(data, {}, f"{path}<json>", name, hints, source, log, depth)
        if out == data:
            return value
        if "\n" in stripped:
            m = re.search(r"\n([ \t]+)\S", stripped)
            indent: int | str | None = m.group(1) if m else 2
            separators = (",", ": ")
        else:
            indent = None
            separators = (
                ", " if re.search(r",\s", stripped) else ",",
                ": " if re.search(r":\s", stripped) else ":",
            )
        text = json.dumps(out, ensure_ascii=False, indent=indent, separators=separators)
        lead = value[: len(value) - len(value.lstrip())]
        trail = value[len(value.rstrip()) :]
        return lead + text + trail

    def _literal(
        self,
        text: str,
        path: str,
        column: str | None,
        source: NoiseSource,
        log: list[Rewrite],
        depth: int,
    ) -> str:
        """One cell or SQL literal, as a field named by its column (quotes kept)."""
        core = text.strip()
        lead = text[: len(text) - len(text.lstrip())]
        trail = text[len(text.rstrip()) :]
        quote = (
            core[:1] if core[:1] in ("'", '"') and core[-1:] == core[:1] and len(core) > 1 else ""
        )
        inner = core[1:-1] if quote else core
        if quote:
            inner = inner.replace(quote * 2, quote)
        name = self.field_value(column) if column else None
        hints = (column,) if column else ()
        new = self._string(inner, path, name, hints, source, log, depth)
        if new == inner:
            return text
        if quote:
            new = quote + new.replace(quote, quote * 2) + quote
        return lead + new + trail

    def _sql(
        self,
        value: str,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
        depth: int,
    ) -> str | None:
        m = _INSERT.search(value)
        if m is None:
            return None
        columns = [c.strip().strip('"`[]') for c in m.group("cols").split(",")]
        edits: list[tuple[int, int, str]] = []
        done: list[tuple[int, int]] = []
        i, n = m.end(), len(value)
        while True:
            while i < n and value[i] in " \t\r\n,":
                i += 1
            if i >= n or value[i] != "(":
                break
            i += 1
            col = 0
            while i < n:
                while i < n and value[i] in " \t\r\n":
                    i += 1
                start = i
                if i < n and value[i] in ("'", '"'):
                    q = value[i]
                    i += 1
                    while i < n:
                        if value[i] == q and value[i + 1 : i + 2] == q:
                            i += 2
                        elif value[i] == q:
                            i += 1
                            break
                        else:
                            i += 1
                while i < n and value[i] not in ",)":
                    i += 1
                literal = value[start:i]
                column = columns[col] if col < len(columns) else None
                new = self._literal(literal, f"{path}<sql>", column, source, log, depth)
                if new != literal:
                    edits.append((start, i, new))
                done.append((start, i))
                if i < n and value[i] == ",":
                    col += 1
                    i += 1
                    continue
                i += 1  # ")"
                break
        rest = apply_edits(value, edits)
        shift_done = shift_spans(done, edits)
        return self._text(rest, path, name, hints, source, log, shift_done)

    def _table(
        self,
        value: str,
        path: str,
        name: str | None,
        hints: tuple[str, ...],
        source: NoiseSource,
        log: list[Rewrite],
        depth: int,
    ) -> str | None:
        lines = [m for m in re.finditer(r"[^\r\n]+", value) if m.group(0).strip()]
        if len(lines) < 2:
            return None
        delimiter = next(
            (
                d
                for d in _TABLE_DELIMITERS
                if len({ln.group(0).count(d) for ln in lines}) == 1 and lines[0].group(0).count(d)
            ),
            None,
        )
        if delimiter is None:
            return None
        header = [c.strip().strip("\"'") for c in lines[0].group(0).split(delimiter)]
        if any(len(c) > 40 or parse_single(c) is not None for c in header if c):
            return None  # no header: the numbers are read as text
        edits: list[tuple[int, int, str]] = []
        done: list[tuple[int, int]] = []
        for line in lines[1:]:
            cells = line.group(0).split(delimiter)
            if all(re.fullmatch(r"\s*:?-{2,}:?\s*|\s*", c) for c in cells):
                continue  # a Markdown table's rule
            position = line.start()
            for j, cell in enumerate(cells):
                column = header[j] if j < len(header) and header[j] else None
                new = self._literal(cell, f"{path}<table>", column, source, log, depth)
                if new != cell:
                    edits.append((position, position + len(cell), new))
                done.append((position, position + len(cell)))
                position += len(cell) + len(delimiter)
        rest = apply_edits(value, edits)
        return self._text(rest, path, name, hints, source, log, shift_spans(done, edits))
