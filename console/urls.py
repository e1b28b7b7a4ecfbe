from django.urls import include, path

from console.api.prometheus import metrics

urlpatterns = [
    path("api/v1/", include("console.api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.ui.urls")),
]
