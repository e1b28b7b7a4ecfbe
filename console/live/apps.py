"""Live updates: the worker that tails the nodes' streams (``manage.py meshwatch``)
and the WebSocket consumer that hands its updates to browsers."""
from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "console.live"
    label = "meshgate_live"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from console.live.sessions import close_sockets_at_logout

        user_logged_out.connect(close_sockets_at_logout, dispatch_uid="console.live.close_sockets_at_logout")
