"""Every page is a shell rendered for the signed-in user; its script reads the API
and listens on the WebSocket. Signing in goes through the throttle (console.ui.throttle)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie

from console.api.permissions import is_admin
from console.ui import throttle

TITLES = {
    "overview": "Overview", "topology": "Topology", "queues": "Queues", "queue": "Queue", "definitions": "Definitions",
    "redistribution": "Redistribution", "connections": "Connections", "links": "Links", "events": "Events",
    "vhosts": "Vhosts", "doctor": "Doctor", "message": "Message",
}


def page(name: str):
    @login_required
    @ensure_csrf_cookie
    def view(request, **kwargs):
        return render(request, f"ui/{name}.html", {
            "page": name, "title": TITLES[name], "is_admin": is_admin(request.user), **kwargs,
        })

    view.__name__ = f"{name}_page"
    return view


_message_page = page("message")


def message(request, message_id: str = ""):
    """A message's journey (admin; a viewer is told so by the page). ``?id=`` (the lookup
    form without script) goes to the id's own address."""
    asked = request.GET.get("id", "").strip()
    if asked and request.user.is_authenticated:
        return redirect(reverse("ui:message", args=[asked]))
    return _message_page(request, message_id=message_id)


class SignIn(LoginView):
    """Django's sign-in, counting failures per user name and per address; past the limit
    it answers 429 with Retry-After: the page says when to try again, a client that
    asks for JSON gets the API's error shape."""

    template_name = "ui/login.html"

    def post(self, request, *args, **kwargs):
        wait = throttle.retry_after(self._username(), self._address())
        if wait:
            return self._throttled(wait)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        throttle.failed(self._username(), self._address())
        return super().form_invalid(form)

    def form_valid(self, form):
        throttle.succeeded(form.get_user().get_username())
        return super().form_valid(form)

    def _username(self) -> str:
        return self.request.POST.get("username", "")

    def _address(self) -> str | None:
        return self.request.META.get("REMOTE_ADDR") or None

    def _throttled(self, wait: int):
        message = f"Too many failed sign-ins for this user or from this address: try again in {wait} s."
        if self.request.get_preferred_type(["text/html", "application/json"]) == "application/json":
            response = JsonResponse({"error": {"code": "throttled", "message": message}}, status=429)
        else:  # an unbound form: rendering the posted one would check its password
            context = self.get_context_data(form=self.get_form_class()(self.request), throttled=message)
            response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(wait)
        return response
