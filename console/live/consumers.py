"""The browser's end: a signed-in user's WebSocket joins the groups it asks for
(``{"subscribe": ["mesh", "queues", "events"]}``), gets the current state of each at
once, then every update the worker sends — while its session lasts (console.live.sessions).
A message it cannot act on gets ``{"type": "error", "message": ...}`` and the socket
stays open (console.live.requests)."""

from __future__ import annotations

import time

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from console.live.requests import BadRequest, wanted_groups
from console.live.sessions import SIGN_IN, session_group, still_signed_in
from console.live.updates import MESH, QUEUES, mesh_state, queue_state
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
        session = self.scope.get("session")
        self.session_key = session.session_key if session is not None else None
        self.joined: set[str] = set()
        self.signed_out = False
        if user is None or not user.is_authenticated or not self.session_key:
            await self._sign_out()  # sign in first
            return
        self.user_id = user.pk
        self.recheck_at = time.monotonic() + settings.CONSOLE_SESSION_RECHECK
        group = session_group(self.session_key)
        self.joined.add(group)
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        if not await self._signed_in():
            return
        try:
            wanted = wanted_groups(text_data)
        except BadRequest as error:
            await self.send_json({"type": "error", "message": str(error)})
            return
        for group in wanted:
            if group in self.joined:
                continue
            self.joined.add(group)
            await self.channel_layer.group_add(group, self.channel_name)
            current = await sync_to_async(_current)(group)
            if current is not None:
                await self.send_json(current)

    async def disconnect(self, code) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def mesh_update(self, message: dict) -> None:
        if await self._signed_in():
            await self.send_json(message["update"])

    async def session_end(self, message: dict) -> None:
        """The session signed out (console.live.sessions.close_sockets_at_logout)."""
        await self._sign_out()

    async def _signed_in(self) -> bool:
        """False once the session is gone; asks the session store at most once per
        ``CONSOLE_SESSION_RECHECK`` seconds (one query), not per update."""
        if self.signed_out:
            return False
        if time.monotonic() >= self.recheck_at:
            if not await still_signed_in(self.session_key, self.user_id):
                await self._sign_out()
                return False
            self.recheck_at = time.monotonic() + settings.CONSOLE_SESSION_RECHECK
        return True

    async def _sign_out(self) -> None:
        if not self.signed_out:
            self.signed_out = True  # updates still queued for this socket are dropped
            await self.close(code=SIGN_IN)
