from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from console.api import definitions, diagnosis, journeys, vhost_permissions, vhosts, views

app_name = "api"
urlpatterns = [
    path("health", views.Health.as_view(), name="health"),
    path("overview", views.OverviewView.as_view(), name="overview"),
    path("overview/history", views.OverviewHistory.as_view(), name="overview-history"),
    path("pipeline", views.PipelineView.as_view(), name="pipeline"),
    path("nodes", views.NodeList.as_view(), name="nodes"),
    path("nodes/<str:node>", views.NodeDetail.as_view(), name="node"),
    path("links", views.LinkList.as_view(), name="links"),
    path("queues", views.QueueList.as_view(), name="queues"),
    path("queues/<path:name>/purge", views.QueuePurge.as_view(), name="queue-purge"),
    path("queues/<path:name>/move", views.QueueMove.as_view(), name="queue-move"),
    path("queues/<path:name>/browse", views.QueueBrowse.as_view(), name="queue-browse"),
    path("queues/<path:name>/send", views.QueueSend.as_view(), name="queue-send"),
    path("queues/<path:name>/history", views.QueueHistory.as_view(), name="queue-history"),
    path("queues/<path:name>", views.QueueDetail.as_view(), name="queue"),
    path("definitions", definitions.DefinitionList.as_view(), name="definitions"),
    path("definitions/queues/<path:name>", definitions.QueueDefinition.as_view(), name="queue-definition"),
    path("definitions/durable/<path:name>", definitions.DurableDefinition.as_view(), name="durable-definition"),
    path("definitions/traces/<path:destination>", definitions.TraceDefinition.as_view(), name="trace-definition"),
    path("connections", views.ConnectionList.as_view(), name="connections"),
    path("connections/<str:connection>", views.ConnectionDetail.as_view(), name="connection"),
    path("vhosts", vhosts.VhostListView.as_view(), name="vhosts"),
    # Before limits: a user may be called "limits". A group's route first: "group/G" is no user.
    path("vhosts/<path:name>/permissions/group/<path:group>", vhost_permissions.GroupPermission.as_view(),
         name="vhost-group-permission"),
    path("vhosts/<path:name>/permissions/<path:user>", vhost_permissions.UserPermission.as_view(),
         name="vhost-user-permission"),
    path("vhosts/<path:name>/permissions", vhost_permissions.VhostPermissionList.as_view(), name="vhost-permissions"),
    path("vhosts/<path:name>/limits", vhosts.VhostLimitsView.as_view(), name="vhost-limits"),
    path("vhosts/<path:name>", vhosts.VhostDetail.as_view(), name="vhost"),
    path("events", views.EventList.as_view(), name="events"),
    path("diagnosis", diagnosis.DiagnosisView.as_view(), name="diagnosis"),
    path("diagnosis/<path:finding_id>/remedy", diagnosis.DiagnosisRemedy.as_view(), name="diagnosis-remedy"),
    path("messages", journeys.MessageSearch.as_view(), name="messages"),
    path("messages/<path:message_id>/journey", journeys.MessageJourney.as_view(), name="message-journey"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]
