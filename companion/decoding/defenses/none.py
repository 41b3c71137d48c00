"""``none``: the undefended model (greedy, or sampling at ``temperature``)."""

from __future__ import annotations

from typing import Any

from companion.decoding.base import BuildContext, Defense, Guarantee


def _build(_config: Any, _ctx: BuildContext) -> None:
    return None


DEFENSE = Defense(
    name="none",
    label="None (no protection)",
    summary="The undefended model: shows what the documents can leak.",
    guarantee=Guarantee(
        formal=False,
        relation=None,
        covers="no token",
        note="No defense: this answer carries no privacy protection or guarantee.",
    ),
    build=_build,
)
