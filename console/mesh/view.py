"""The mesh as the console sees it, read from the nodes' snapshot stream in Redis.

Nothing here is the console's own state: a view is rebuilt from the stream (the
last ``window`` seconds of it at first, then what is new) and can be thrown away
at any time. Each refresh produces a new :class:`MeshFrame` with every row and
total computed once; readers use the current frame, from any thread, without
waiting. In a web process a background thread refreshes it (``start``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import msgspec

from console.mesh.frame import MeshFrame, NodeSnapshots
from model.mesh import Snapshot
from model.rollups import queue_key

log = logging.getLogger(__name__)
_decode = msgspec.json.Decoder(Snapshot).decode
_PAGE = 1000


class MeshView:
    def __init__(self, redis_client: Callable[[], object], prefix: str = "meshgate", window: float = 120.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = redis_client
        self.stream = f"{prefix}:snapshots"
        self.window = window
        self.clock = clock
        self._latest: dict[str, tuple[Snapshot, Snapshot | None]] = {}  # node id -> (latest, previous)
        self._last_id: bytes | None = None
        self._lock = threading.Lock()  # one refresh at a time
        self._starting = threading.Lock()
        self._frame: MeshFrame | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    # -- frames -----------------------------------------------------------------------------

    @property
    def frame(self) -> MeshFrame:
        """The mesh as of the last refresh (refreshing now if there was none)."""
        frame = self._frame
        if frame is None:
            self.refresh()
            frame = self._frame
        return frame

    def refresh(self) -> set[str]:
        """Take in what the nodes wrote since the last refresh and compute a new frame;
        returns the ids of the nodes whose snapshot changed."""
        with self._lock:
            now = self.clock()
            client = self._client()
            changed = self._tail(client) if self._last_id is not None else self._backfill(client, now)
            snapshots = {node_id: NodeSnapshots(latest, previous,
                                                {queue_key(q.name, q.vhost): q for q in previous.queues}
                                                if previous else {})
                         for node_id, (latest, previous) in self._latest.items()}
            self._frame = MeshFrame(snapshots, now)  # states change with time too: always a new one
            return changed

    def start(self, interval: float = 0.5) -> None:
        """Keep the frame fresh from a thread of its own (once per process)."""
        if self._thread is not None:
            return  # without the lock: a refresh holds it, and requests must not wait for one
        with self._starting:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, args=(interval,), name="mesh-view", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self, interval: float) -> None:
        failing = False
        while not self._stopped.is_set():
            started = time.monotonic()
            wait = interval
            try:
                self.refresh()
                # A big mesh makes refreshes long: then they come less often (at most a third
                # of this thread's time), so requests still get the processor.
                wait = max(interval, 2 * (time.monotonic() - started))
                failing = False
            except Exception as error:  # Redis away for a while: keep the last frame, try again
                if not failing:
                    log.warning("mesh view: cannot read the snapshots (%s); keeping the last view, retrying", error)
                failing = True
            self._stopped.wait(max(0.05, wait - (time.monotonic() - started)))

    # -- reading the stream -----------------------------------------------------------------

    def _backfill(self, client, now: float) -> set[str]:
        entries = []
        newest = None
        start = "+"
        while True:
            page = client.xrevrange(self.stream, start, "-", count=_PAGE)
            if not page:
                break
            if newest is None:
                newest = page[0][0]
            entries.extend(page)
            oldest_id = page[-1][0]
            if len(page) < _PAGE or _id_time(oldest_id) < now - self.window:
                break
            start = "(" + oldest_id.decode()
        self._last_id = newest or b"0-0"
        return self._take_newest(reversed(entries))

    def _tail(self, client) -> set[str]:
        entries = []
        while True:
            page = client.xrange(self.stream, "(" + self._last_id.decode(), "+", count=_PAGE)
            if page:
                entries.extend(page)
                self._last_id = page[-1][0]
            if len(page) < _PAGE:
                return self._take_newest(entries)

    def _take_newest(self, entries) -> set[str]:
        """Take in the entries, oldest first: each node's newest and the one before it
        (for rates) are decoded, the rest skipped — a refresh that fell behind catches
        up at once instead of decoding every second it missed."""
        by_node: dict[bytes, list[dict]] = {}
        for _, fields in entries:
            by_node.setdefault(fields.get(b"node", b""), []).append(fields)
        changed = set()
        for node_entries in by_node.values():
            for fields in node_entries[-2:]:
                changed |= self._take(fields)
        return changed

    def _take(self, fields: dict) -> set[str]:
        try:
            snapshot = _decode(fields[b"data"])
        except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
            return set()  # not a snapshot this console can read: skipped
        node_id = snapshot.node.id
        known = self._latest.get(node_id)
        if known is not None:
            latest = known[0]
            if snapshot.node.started_at == latest.node.started_at and snapshot.seq <= latest.seq:
                return set()  # a duplicate, or late
        self._latest[node_id] = (snapshot, known[0] if known else None)
        return {node_id}

def _id_time(entry_id: bytes) -> float:
    return int(entry_id.split(b"-")[0]) / 1000.0
