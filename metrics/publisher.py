"""Writing entries to Redis streams from a thread of its own.

Redis down, slow or full must never hold up the broker: the reactor only
appends to a bounded buffer (the oldest entries go when it is full, and
``dropped`` counts them); this thread writes what is buffered with pipelined
XADDs, trimming a stream to about ``maxlen`` entries, or to what is younger than
an entry's ``keep_seconds`` (MINID: snapshots are kept for a time whatever the
number of nodes writing them). When Redis fails it
logs once, says ``behind``, and retries with backoff until Redis is back."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from model.mesh import MetricsStatus

log = logging.getLogger(__name__)

_BATCH = 500  # entries per pipeline
_RETRY_FIRST, _RETRY_MAX = 0.2, 5.0  # seconds between attempts while Redis fails


class StreamPublisher:
    def __init__(self, url: str, prefix: str = "meshgate", maxlen: int = 100_000, buffer_size: int = 10_000) -> None:
        self.url = url
        self.prefix = prefix
        self.maxlen = maxlen
        self.buffer_size = buffer_size
        self._buffer: deque[tuple[int, str, dict, str | None]] = deque()  # seq, stream, fields, min id
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._seq = 0
        self._writing = 0  # entries at the head of the buffer in the batch being written
        self._stopping = False
        self._stopped = threading.Event()  # ends a backoff wait early (new entries do not)
        self._thread: threading.Thread | None = None
        self.dropped = 0
        self.written = 0
        self.last_error: str | None = None
        self._failing = False

    # -- the reactor's side -----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-publisher", daemon=True)
        self._thread.start()

    def offer(self, stream: str, fields: dict, keep_seconds: float | None = None) -> None:
        """Buffer an entry for ``<prefix>:<stream>``; never blocks on Redis. With
        ``keep_seconds`` the stream keeps about that long a history, else ``maxlen`` entries."""
        min_id = f"{int((time.time() - keep_seconds) * 1000)}-0" if keep_seconds else None
        with self._lock:
            buffer = self._buffer
            self._seq += 1
            if len(buffer) >= self.buffer_size:
                # The oldest entry that is not being written goes (one being written may yet arrive).
                self.dropped += 1
                if self._writing >= len(buffer):
                    return  # all of it is on its way: this one is the one dropped
                del buffer[self._writing]
            buffer.append((self._seq, f"{self.prefix}:{stream}", fields, min_id))
            self._wake.notify()

    def status(self) -> MetricsStatus:
        with self._lock:
            buffered = len(self._buffer)
        behind = self._failing or buffered > _BATCH
        return MetricsStatus(state="behind" if behind else "ok", buffered=buffered, dropped=self.dropped,
                             last_error=self.last_error if self._failing else None)

    def stop(self, patience: float = 2.0) -> None:
        """Write what Redis takes within ``patience`` seconds, then stop."""
        with self._lock:
            self._stopping = True
            self._wake.notify()
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(patience)

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        import redis  # only nodes that publish need it

        client = redis.Redis.from_url(self.url, socket_timeout=2.0, socket_connect_timeout=2.0)
        delay = _RETRY_FIRST
        while True:
            with self._lock:
                while not self._buffer and not self._stopping:
                    self._wake.wait()
                if self._stopping and (not self._buffer or self._failing):
                    break
                batch = [self._buffer[i] for i in range(min(_BATCH, len(self._buffer)))]
                self._writing = len(batch)
            try:
                pipe = client.pipeline(transaction=False)
                for _, stream, fields, min_id in batch:
                    if min_id is None:
                        pipe.xadd(stream, fields, maxlen=self.maxlen, approximate=True)
                    else:
                        pipe.xadd(stream, fields, minid=min_id, approximate=True)
                pipe.execute()
            except (redis.RedisError, OSError) as error:
                with self._lock:
                    self._writing = 0
                self._failed(error)
                self._stopped.wait(delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            delay = _RETRY_FIRST
            self._written(len(batch))
        client.close()

    def _written(self, count: int) -> None:
        with self._lock:
            for _ in range(self._writing):  # the batch is still at the head: nothing in it was dropped
                self._buffer.popleft()
            self._writing = 0
        self.written += count
        if self._failing:
            self._failing = False
            log.info("metrics: writing to Redis at %s again (%d entries dropped so far)", self.url, self.dropped)

    def _failed(self, error: Exception) -> None:
        self.last_error = f"{type(error).__name__}: {error}"
        if not self._failing:
            self._failing = True
            log.warning("metrics: cannot write to Redis at %s (%s); keeping up to %d entries and retrying",
                        self.url, self.last_error, self.buffer_size)
