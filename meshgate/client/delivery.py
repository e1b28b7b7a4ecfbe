"""Where received messages go: to their subscription's callback on one dispatch
thread, in order, or into a queue that :meth:`FailoverConnection.receive` reads."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from meshgate.client.messages import Message

log = logging.getLogger("meshgate.client")

Callback = Callable[[Message], None]


class Deliveries:
    def __init__(self) -> None:
        self._inbox: queue.Queue[tuple[Callback, Message] | None] = queue.Queue()
        self._received: queue.Queue[Message] = queue.Queue()  # of subscriptions without a callback
        self._dispatcher: threading.Thread | None = None

    def start(self) -> None:
        """Run the dispatch thread (again, after :meth:`stop`)."""
        if self._dispatcher is None or not self._dispatcher.is_alive():
            self._dispatcher = threading.Thread(target=self._dispatch, name="meshgate-client-dispatch", daemon=True)
            self._dispatcher.start()

    def put(self, callback: Callback | None, message: Message) -> None:
        if callback is not None:
            self._inbox.put((callback, message))
        else:
            self._received.put(message)

    def receive(self, timeout: float | None) -> Message | None:
        try:
            return self._received.get(timeout=timeout)
        except queue.Empty:
            return None

    def stop(self, timeout: float) -> None:
        """Stop the dispatch thread once the callbacks already queued have run."""
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            self._inbox.put(None)
            if dispatcher is not threading.current_thread():
                dispatcher.join(timeout)

    def _dispatch(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            callback, message = item
            try:
                callback(message)
            except Exception:
                log.exception("meshgate.client: a subscription callback failed")
