"""Lists come in pages: ``?page=N&page_size=M`` (M ≤ 500), answered as
``{items, page, page_size, page_count, total_count}`` (RabbitMQ's paging)."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

MAX_PAGE_SIZE = 500
_PAGE_SIZE = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE)


class Pages(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            return _PAGE_SIZE.run_validation(raw)
        except ValidationError:
            raise ValidationError({"page_size": f"must be a number from 1 to {MAX_PAGE_SIZE}"}) from None

    def get_paginated_response(self, data) -> Response:
        return Response({
            "items": data,
            "page": self.page.number,
            "page_size": self.page.paginator.per_page,
            "page_count": self.page.paginator.num_pages,
            "total_count": self.page.paginator.count,
        })

    def get_paginated_response_schema(self, schema: dict) -> dict:
        return {"type": "object", "required": ["items", "page", "page_size", "page_count", "total_count"],
                "properties": {"items": schema, "page": {"type": "integer"}, "page_size": {"type": "integer"},
                               "page_count": {"type": "integer"}, "total_count": {"type": "integer"}}}
