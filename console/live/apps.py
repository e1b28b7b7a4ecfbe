from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "console.live"
    label = "meshgate_live"
