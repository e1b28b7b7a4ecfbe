from django.urls import include, path

from console.api.prometheus import metrics

urlpatterns = [
    path("api/v1/", include("console.api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("console.ui.urls")),
]
# The API's paths answer JSON errors even where Django answers before any view.
handler400 = "console.api.errors.bad_request"
handler404 = "console.api.errors.not_found"
