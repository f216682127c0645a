"""Domain errors raised by services and selectors; the API maps them to status codes."""

from __future__ import annotations


class DomainError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, detail: str, *, code: str | None = None, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.field = field


class InvalidInput(DomainError):
    status_code = 400
    code = "invalid"


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class Forbidden(DomainError):
    status_code = 403
    code = "forbidden"


class Conflict(DomainError):
    status_code = 409
    code = "conflict"
    # A refused revert names the later change that stands in the way, so a page can link to it.
    blocking_record_id: int | None = None
    blocking_memory_id: str | None = None

    def blocked_by(self, record_id: int | None, memory_id: str | None) -> Conflict:
        """Name the later record (and a memory it changed) that blocks the operation; returns self."""
        self.blocking_record_id = record_id
        self.blocking_memory_id = memory_id
        return self
