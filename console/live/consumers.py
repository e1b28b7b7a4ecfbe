"""The browser's end: a signed-in user's WebSocket joins the groups it asks for
(``{"subscribe": ["mesh", "queues", "events"]}``), gets the current state of each at
once, then every update the worker sends."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.live.updates import EVENTS, GROUPS, MESH, QUEUES, mesh_state, queue_state
from console.mesh.sources import mesh_view


def _current(group: str) -> dict | None:
    frame = mesh_view().frame
    if group == MESH:
        return mesh_state(frame)
    if group == QUEUES:
        return queue_state(frame)
    return None


class MeshConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)  # sign in first
            return
        self.joined: set[str] = set()
        await self.accept()

    async def receive_json(self, content, **kwargs) -> None:
        wanted = content.get("subscribe") if isinstance(content, dict) else None
        if not isinstance(wanted, list) or not all(name in GROUPS for name in wanted):
            await self.send_json({"type": "error",
                                  "message": f"send {{\"subscribe\": [...]}} with some of {sorted(GROUPS)}"})
            return
        for name in wanted:
            group = GROUPS[name]
            if group in self.joined:
                continue
            self.joined.add(group)
            await self.channel_layer.group_add(group, self.channel_name)
            current = await sync_to_async(_current)(group)
            if current is not None:
                await self.send_json(current)

    async def disconnect(self, code) -> None:
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def mesh_update(self, message: dict) -> None:
        await self.send_json(message["update"])


__all__ = ["MeshConsumer", "EVENTS"]
