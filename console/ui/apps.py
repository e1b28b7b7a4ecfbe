from django.apps import AppConfig


class UiConfig(AppConfig):
    name = "console.ui"
    label = "meshgate_ui"
