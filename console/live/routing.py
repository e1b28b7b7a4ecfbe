from django.urls import path

from console.live.consumers import MeshConsumer

websocket_urlpatterns = [path("ws/mesh", MeshConsumer.as_asgi())]
