from django.contrib.auth import views as auth_views
from django.urls import path

from console.ui import views

app_name = "ui"
urlpatterns = [
    path("login/", views.SignIn.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.page("overview"), name="overview"),
    path("topology/", views.page("topology"), name="topology"),
    path("queues/", views.page("queues"), name="queues"),
    path("queues/<path:name>/", views.page("queue"), name="queue"),
    path("definitions/", views.page("definitions"), name="definitions"),
    path("redistribution/", views.page("redistribution"), name="redistribution"),
    path("connections/", views.page("connections"), name="connections"),
    path("links/", views.page("links"), name="links"),
    path("events/", views.page("events"), name="events"),
    path("vhosts/", views.page("vhosts"), name="vhosts"),
    path("doctor/", views.page("doctor"), name="doctor"),
    path("messages/", views.message, name="messages"),
    path("messages/<str:message_id>/", views.message, name="message"),
]
