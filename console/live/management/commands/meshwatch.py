"""``manage.py meshwatch``: tail the nodes' snapshot and event streams and push
every change to the browsers (Channels groups), until stopped.

Each tick (at most ``--tick`` seconds, sooner when events come) it takes in new
snapshots, and sends the mesh state (overview, nodes, links) and the queue rows
when they changed, and every new event as it is."""

from __future__ import annotations

import logging
import signal
import time

import msgspec
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.management.base import BaseCommand

from console.live.updates import EVENTS, MESH, QUEUES, mesh_state, queue_state
from console.mesh.shared import Publisher
from console.mesh.sources import mesh_view, redis_client, stream
from model.events import AnyEvent

log = logging.getLogger(__name__)
_decode_event = msgspec.json.Decoder(AnyEvent).decode
RESEND_AFTER = 5.0  # seconds: an unchanged state is sent again this often (ages move on)
_CLOCKS = ("taken_at", "age", "last_seen")


def _steady(value):
    """The state without what changes with the clock alone, to tell news from none."""
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in _CLOCKS}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


class Command(BaseCommand):
    help = "Push the mesh's snapshots and events to the console's browsers as they come."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tick", type=float, default=0.5, help="seconds between looks at the snapshots")

    def handle(self, *args, tick: float = 0.5, **options) -> None:
        self.running = True
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        layer = get_channel_layer()
        send = async_to_sync(layer.group_send)
        last_event = "$"
        publisher = Publisher(redis_client(), settings.MESHGATE["STREAM_PREFIX"])
        sent: dict[str, tuple[bytes, float]] = {}  # group -> (what it got, when)
        sequence: dict[str, int] = {}
        self.stdout.write("meshwatch: tailing the mesh's streams", ending="\n")
        self.stdout.flush()
        while self.running:
            started = time.monotonic()
            try:
                last_event = self._events(send, last_event, tick)
                frame = mesh_view(fresh=True).frame
                publisher.publish(frame)  # for the web processes' API
                now = time.monotonic()
                for group, state in ((MESH, mesh_state(frame)), (QUEUES, queue_state(frame))):
                    digest = msgspec.json.encode(_steady(state))
                    previous = sent.get(group)
                    if previous is None or previous[0] != digest or now - previous[1] >= RESEND_AFTER:
                        sent[group] = (digest, now)
                        sequence[group] = sequence.get(group, 0) + 1
                        state["seq"] = sequence[group]  # a browser can tell that it missed one
                        send(group, {"type": "mesh.update", "update": state})
            except Exception:  # Redis restarting: keep going, the streams will be there again
                log.exception("meshwatch: this tick failed")
                time.sleep(1.0)
            rest = tick - (time.monotonic() - started)
            if rest > 0:
                time.sleep(rest)

    def _events(self, send, last: str, block: float) -> str:
        """Forward the events written since ``last``, waiting up to ``block`` seconds for some."""
        answer = redis_client().xread({stream("events"): last}, block=int(block * 1000), count=1000)
        for _, entries in answer or ():
            for entry_id, fields in entries:
                last = entry_id.decode()
                try:
                    event = msgspec.to_builtins(_decode_event(fields[b"data"]))
                except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
                    continue
                send(EVENTS, {"type": "mesh.update", "update": {"type": "event", "event": event}})
        if last == "$":
            info = redis_client().xinfo_stream(stream("events")) if redis_client().exists(stream("events")) else None
            last = info["last-generated-id"].decode() if info else "0-0"
        return last

    def _stop(self, *args) -> None:
        self.running = False
