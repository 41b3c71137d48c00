"""The ledger: privacy events kept with labels, replayed through any accountant, saved."""

from __future__ import annotations

from dataclasses import dataclass, field

from py_core.accounting.common import _count
from py_core.accounting.dp_event import Event, _check_event, event_from_dict, event_to_dict
from py_core.accounting.pld.pld_privacy_accountant import KrrPldAccountant
from py_core.accounting.privacy_accountant import Accountant, BasicAccountant
from py_core.accounting.rdp.rdp_privacy_accountant import RdpAccountant
from py_core.errors import InvalidParameterError, StateError

ACCOUNTANTS: dict[str, type[Accountant]] = {
    BasicAccountant.name: BasicAccountant,
    RdpAccountant.name: RdpAccountant,
    KrrPldAccountant.name: KrrPldAccountant,
}


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One recorded event: what it was, how many times, and free-form labels (site, document)."""

    event: Event
    count: int = 1
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_event(self.event)
        _count(self.count)


@dataclass(slots=True)
class Ledger:
    """Privacy events kept apart from the accountants that compose them.

    Holds many events across prompts and answers; :meth:`epsilon` replays them
    (optionally only those carrying a label, e.g. one site or one document)
    through any accountant.  Saved with :meth:`to_dict` and restored with
    :meth:`from_dict`, which refuses a corrupted state rather than starting over.
    """

    entries: list[LedgerEntry] = field(default_factory=list)

    def record(self, event: Event, count: int = 1, **labels: str) -> LedgerEntry:
        entry = LedgerEntry(event, count, tuple(sorted((k, str(v)) for k, v in labels.items())))
        self.entries.append(entry)
        return entry

    def select(self, **labels: str) -> list[LedgerEntry]:
        wanted = {(k, str(v)) for k, v in labels.items()}
        return [e for e in self.entries if wanted <= set(e.labels)]

    def accountant(self, kind: str | Accountant = "rdp", **labels: str) -> Accountant:
        if isinstance(kind, Accountant):
            acc = kind
        else:
            if kind not in ACCOUNTANTS:
                raise InvalidParameterError(
                    f"unknown accountant {kind!r}; choose one of {', '.join(ACCOUNTANTS)}"
                )
            acc = ACCOUNTANTS[kind]()
        for entry in self.select(**labels):
            acc.compose(entry.event, entry.count)
        return acc

    def epsilon(self, delta: float, kind: str = "rdp", **labels: str) -> float:
        return self.accountant(kind, **labels).get_epsilon(delta)

    def to_dict(self) -> dict[str, object]:
        return {
            "version": 2,
            "entries": [
                {"event": event_to_dict(e.event), "count": e.count, "labels": dict(e.labels)}
                for e in self.entries
            ],
        }

    @classmethod
    def from_dict(cls, state: object) -> Ledger:
        try:
            assert isinstance(state, dict) and state.get("version") == 2
            entries = []
            for raw in state["entries"]:
                labels = raw.get("labels", {})
                assert isinstance(labels, dict)
                entries.append(
                    LedgerEntry(
                        event_from_dict(raw["event"]),
                        raw["count"],
                        tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                    )
                )
        except (AssertionError, KeyError, TypeError, ValueError, InvalidParameterError) as exc:
            raise StateError(
                f"privacy ledger state is corrupted or from another version: {exc}"
            ) from exc
        return cls(entries=entries)
