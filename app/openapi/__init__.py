"""The OpenAPI 3.1 document of every API route, served at `GET /openapi.json`."""

from app.openapi.document import document

__all__ = ["document"]
