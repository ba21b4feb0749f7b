"""The one error every refusal of the server becomes: an HTTP status and OpenAI's error object.

Owns `ApiError` and its JSON shape ``{"error": {"message", "type", "param", "code"}}``, the shape the openai SDK
turns into ``BadRequestError`` / ``AuthenticationError`` / ``RateLimitError`` with ``.param`` and ``.code`` set.
Refuses free-form error bodies: every status the server sends on purpose goes through here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError"]

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
          500: "server_error", 503: "server_error", 504: "timeout_error"}


class ApiError(Exception):
    """A request the server refuses or could not finish; ``body()`` is what the client receives."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.status = status
        """HTTP status (400 bad request, 401 no key, 429 queue full, 504 past the deadline...)."""
        self.message = message
        """What is wrong, where, and what would work."""
        self.param = param
        """The request field at fault, OpenAI-style (``tools[0].function.parameters``, ``tool_choice``)."""
        self.code = code
        """A stable machine-readable code (``unsupported_schema``, ``context_length_exceeded``, ``queue_full``)."""
        self.headers = dict(headers or {})
        """Extra response headers (``Retry-After`` on 429)."""
        super().__init__(message)

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        """OpenAI's error object."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
