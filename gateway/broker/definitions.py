"""The node's copy of the mesh-wide definitions (model.definitions): made here,
merged from peers, kept in the catalog. Applying them is the broker's job, and
shipping them the mesh's."""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from model.definitions import Definition, DefinitionKind


class Definitions:
    def __init__(self, origin: str) -> None:
        self.origin = origin  # this node's id: the origin of the changes made here
        self._records: dict[tuple[str, str], Definition] = {}
        self._clock = 0  # the highest version seen

    def get(self, kind: DefinitionKind, name: str) -> Definition | None:
        """The record for a name, a tombstone included."""
        return self._records.get((kind, name))

    def live(self, kind: DefinitionKind) -> dict[str, Definition]:
        return {name: r for (k, name), r in self._records.items() if k == kind and not r.deleted}

    def records(self) -> list[Definition]:
        return sorted(self._records.values(), key=lambda r: (r.kind, r.name))

    def change(self, kind: DefinitionKind, name: str, now: float, **spec: Any) -> Definition:
        """A change made on this node: ``queue=``, ``durable=``, ``exchange=`` or
        ``binding=`` the new value, none of them for a deletion."""
        self._clock += 1
        record = Definition(kind=kind, name=name, version=self._clock, origin=self.origin, changed_at=now, **spec)
        self._records[(kind, name)] = record
        return record

    def merge(self, record: Definition) -> bool:
        """Take a record from elsewhere if it wins over the one held; say whether it did."""
        self._clock = max(self._clock, record.version)
        key = (record.kind, record.name)
        if not record.wins_over(self._records.get(key)):
            return False
        self._records[key] = record
        return True

    def drop_tombstones(self, older_than: float) -> int:
        """Forget deletions made before ``older_than``: by then every node that
        will ever be heard from again has heard of them (mesh.peer_retention_s)."""
        old = [key for key, r in self._records.items() if r.deleted and r.changed_at < older_than]
        for key in old:
            del self._records[key]
        return len(old)

    # -- the catalog ----------------------------------------------------------------------

    def to_catalog(self) -> list[dict]:
        return msgspec.to_builtins(self.records())

    def load_catalog(self, entries: Iterable[dict]) -> None:
        for record in msgspec.convert(list(entries), list[Definition]):
            self.merge(record)
