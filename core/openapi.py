"""The OpenAPI document's view of request bodies: each ``core.schemas.RequestBody`` documents itself.

drf-spectacular ships an extension for pydantic models that writes their serialisation schema; a request body
is documented by what it accepts (its validation schema, in the OpenAPI 3.0 dialect the document uses), and
nested bodies become shared components. Imported by the URL configuration, which registers it. The query
parameters of a GET are a ``core.schemas.QueryParams`` model too, listed by ``parameters_of``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiParameter

from core.schemas import QueryParams, RequestBody, nested_models, openapi_schema, query_parameters


class RequestBodyExtension(OpenApiSerializerExtension):
    target_class = RequestBody
    match_subclasses = True
    priority = 1  # before drf-spectacular's own pydantic extension

    def get_name(self, auto_schema: Any, direction: str) -> str:
        name: str = self.target.__name__
        return name

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = openapi_schema(self.target)
        models = {model.__name__: model for model in nested_models(self.target)}
        for name, nested in schema.pop("$defs", {}).items():
            # The model itself is the component's identity, as when it is a body of its own (BulkIn's
            # items are MemoryIn, the body of POST memories/): one component, not two of one name.
            component = ResolvedComponent(  # type: ignore[no-untyped-call]
                name=name, type=ResolvedComponent.SCHEMA, object=models.get(name, name), schema=nested
            )
            auto_schema.registry.register_on_missing(component)
        return schema


def parameters_of(model: type[QueryParams]) -> list[OpenApiParameter]:
    """The query parameters ``model`` reads, documented from its own fields (``extend_schema(parameters=...)``)."""
    return [
        OpenApiParameter(
            p["name"],
            # A repeated parameter (tag=a&tag=b) is an array written out one value per name.
            {"type": "array", "items": p["schema"]} if p["many"] else p["schema"],
            OpenApiParameter.QUERY,
            required=p["required"],
            description=p["description"],
            explode=True if p["many"] else None,
        )
        for p in query_parameters(model)
    ]
