"""Edits of a text: replaced spans, applied and tracked (the MCP rewriter's bookkeeping)."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rewrite:
    """One replaced value: where, which, how it was found, and what was sent instead."""

    path: str  # JSON path in the arguments, e.g. "$.vitals[0].value"
    name: str  # the profile value
    how: str  # "field" | "pair" | "text" | "value"
    sent: str  # what the service received there (a noisy value)

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "name": self.name, "how": self.how, "sent": self.sent}


class Spans:
    """A set of text spans, merged, for "does this overlap one" in O(log n)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        self.starts.insert(i, start)
        # ``ends`` holds the furthest end of the spans up to each one (what overlaps() asks).
        self.ends.insert(i, max(end, self.ends[i - 1]) if i else end)
        j = i + 1
        while j < len(self.ends) and self.ends[j] < self.ends[j - 1]:
            self.ends[j] = self.ends[j - 1]
            j += 1

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self.starts, end)  # spans starting before ``end``
        return i > 0 and self.ends[i - 1] > start


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, position = [], 0
    for start, end, new in sorted(edits):
        out.append(text[position:start])
        out.append(new)
        position = end
    out.append(text[position:])
    return "".join(out)


def shift_spans(
    spans: list[tuple[int, int]], edits: list[tuple[int, int, str]]
) -> list[tuple[int, int]]:
    """``spans`` of a text moved to where they stand once ``edits`` (each inside one span or
    outside all of them) are applied."""
    ordered = sorted(edits)
    starts = [e[0] for e in ordered]
    ends = sorted(e[1] for e in ordered)
    by_end = sorted(ordered, key=lambda e: e[1])
    before_end = list(itertools.accumulate((len(e[2]) - (e[1] - e[0]) for e in by_end), initial=0))
    before_start = list(
        itertools.accumulate((len(e[2]) - (e[1] - e[0]) for e in ordered), initial=0)
    )
    out = []
    for a, b in spans:
        shift_a = before_end[bisect.bisect_right(ends, a)]  # edits that end at or before a
        shift_b = before_start[bisect.bisect_left(starts, b)]  # edits that start before b
        out.append((a + shift_a, b + shift_b))
    return out
