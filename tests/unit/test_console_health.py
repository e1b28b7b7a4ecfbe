"""The console skeleton answers its health endpoint."""

import os

import django
from django.test import Client


def test_health_endpoint():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    django.setup()
    response = Client(HTTP_HOST="127.0.0.1").get("/api/v1/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
