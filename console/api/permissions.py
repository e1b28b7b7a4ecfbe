"""Roles: any signed-in user (or token) may read; admins act. An admin is a
superuser or a member of the ``admins`` group."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

ADMINS = "admins"


def is_admin(user) -> bool:
    return bool(user and user.is_authenticated and (user.is_superuser or user.groups.filter(name=ADMINS).exists()))


class Viewer(BasePermission):
    message = "sign in, or send an API token (Authorization: Token …)"

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)


class Admin(BasePermission):
    message = "this action needs an administrator"

    def has_permission(self, request, view) -> bool:
        return is_admin(request.user)
