"""catalog.json: what a node's brokers define (queues, definitions, link patterns),
one document for every vhost so that it is replaced atomically and replicated as
one file. The default vhost's catalog is the document's top level, as a release
before vhosts wrote it (and still reads it: it ignores keys it does not know);
another vhost's is under ``"vhosts"``, by name, kept whenever another is saved."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.store.files import write_json_atomically
from model.names import DEFAULT_VHOST

VHOSTS_KEY = "vhosts"


class CatalogFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._document: dict | None = None  # as last read or written

    def load(self, vhost: str = DEFAULT_VHOST) -> dict:
        document = self._read()
        if vhost == DEFAULT_VHOST:
            return {key: value for key, value in document.items() if key != VHOSTS_KEY}
        return dict(document.get(VHOSTS_KEY, {}).get(vhost, {}))

    def save(self, catalog: dict, vhost: str = DEFAULT_VHOST) -> None:
        document = self._read()
        others = document.get(VHOSTS_KEY, {})
        if vhost == DEFAULT_VHOST:
            replaced = {**catalog, VHOSTS_KEY: others} if others else dict(catalog)
        else:
            replaced = {**document, VHOSTS_KEY: {**others, vhost: catalog}}
        write_json_atomically(self.path, replaced)
        self._document = replaced

    def _read(self) -> dict:
        if self._document is None:
            self._document = json.loads(self.path.read_text()) if self.path.exists() else {}
        return self._document
