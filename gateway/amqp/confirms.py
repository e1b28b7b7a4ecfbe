"""Publisher confirms (confirm.select) of one AMQP channel: its publishes are
numbered and settled in order, each acked once what it wrote is durable, or nacked
if the store refused it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.amqp.codec import encode_method

if TYPE_CHECKING:
    from gateway.amqp.channel import Channel


class Confirms:
    def __init__(self, channel: Channel) -> None:
        self._connection = channel.connection
        self._number = channel.number
        self._session = channel.session
        self._broker = channel.broker
        # Settled in order: _confirmed is the last publish acked or nacked, _published the
        # last one published, _refused those the store refused meanwhile.
        self._published = self._confirmed = 0
        self._scheduled = False  # a store waiter is to be registered for this reactor turn's publishes
        self._waiters = 0  # registered, not fired yet
        self._refused: set[int] = set()

    def published(self, stored: bool) -> None:
        """One more publish was taken; ``stored``: it wrote to the store."""
        self._published += 1
        if stored or self._scheduled or self._waiters > 0 or self._confirmed != self._published - 1:
            self._when_durable()
        else:
            self._settle(self._published, ok=True)

    def refused(self) -> None:
        """One more publish was refused (the store failed): it hears nack, in its turn."""
        self._published += 1
        if self._confirmed == self._published - 1 and not (self._scheduled or self._waiters > 0):
            self._settle(self._published, ok=False)
        else:
            self._refused.add(self._published)

    def _when_durable(self) -> None:
        """One store waiter per reactor turn, for the publishes read in it: waiters
        fire in order, each with one basic.ack (multiple) for its publishes, so a
        sync that covers a thousand publishes costs one waiter and one frame."""
        if not self._scheduled:
            self._scheduled = True
            self._connection.clock.callLater(0, self._wait_for_durable)

    def _wait_for_durable(self) -> None:
        self._scheduled = False
        if self._session.closed:
            return
        self._waiters += 1
        upto = self._published
        self._broker.store.when_durable(told_of_failed_writes=True).addCallbacks(
            self._durable, self._durable, callbackArgs=(upto, True), errbackArgs=(upto, False))

    def _durable(self, _: object, upto: int, ok: bool) -> None:
        self._waiters -= 1
        if upto > self._confirmed:
            self._settle(upto, ok)

    def _settle(self, upto: int, ok: bool) -> None:
        if self._session.closed:
            return
        refused = [sequence for sequence in self._refused if sequence <= upto]
        if not refused or not ok:
            method = "basic.ack" if ok else "basic.nack"
            multiple = upto > self._confirmed + 1
            values = {"requeue": False} if not ok else {}
            self._reply(method, delivery_tag=upto, multiple=multiple, **values)
        else:  # some in between were refused: each its own answer
            for sequence in range(self._confirmed + 1, upto + 1):
                if sequence in self._refused:
                    self._reply("basic.nack", delivery_tag=sequence, multiple=False, requeue=False)
                else:
                    self._reply("basic.ack", delivery_tag=sequence, multiple=False)
        self._refused.difference_update(refused)
        self._confirmed = upto

    def _reply(self, name: str, **values: Any) -> None:
        self._connection.write(encode_method(self._number, name, **values))
