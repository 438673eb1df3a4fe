"""What the rkv clients raise on purpose.

Each exception carries the server's ``code`` and ``message``, the HTTP
``status`` (None when no answer came) and the node ``url``::

    RkvClientError
    ├── KeyNotFoundError          404 not_found
    ├── VersionConflictError      412 version_conflict; .current_version
    ├── InvalidRequestError       400 (invalid_key, reserved_key, not_utf8, ...)
    ├── PayloadTooLargeError      413 payload_too_large
    ├── UnavailableError          503: the cluster cannot serve it now; .retry_after
    │   ├── NotAppliedError       not_applied / no_leader: the write was not applied
    │   ├── UnknownOutcomeError   the write may or may not have been applied
    │   └── OverloadedError       overloaded: too many requests in flight
    └── ClusterUnreachableError   no node could be reached (code "unreachable")

Which answer becomes which exception is decided in
:func:`http_api.client.wire.error_from_reply`.
"""

from __future__ import annotations


class RkvClientError(Exception):
    """Base of everything the client raises on purpose."""

    default_code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.status = status
        self.url = url

    @property
    def message(self) -> str:
        return str(self)


class KeyNotFoundError(RkvClientError):
    default_code = "not_found"


class VersionConflictError(RkvClientError):
    default_code = "version_conflict"

    def __init__(
        self,
        message: str,
        current_version: int,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.current_version = current_version


class InvalidRequestError(RkvClientError):
    default_code = "invalid_request"


class PayloadTooLargeError(RkvClientError):
    default_code = "payload_too_large"


class UnavailableError(RkvClientError):
    default_code = "unavailable"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.retry_after = retry_after


class NotAppliedError(UnavailableError):
    default_code = "not_applied"


class UnknownOutcomeError(UnavailableError):
    default_code = "unknown_outcome"


class OverloadedError(UnavailableError):
    default_code = "overloaded"


class ClusterUnreachableError(RkvClientError):
    default_code = "unreachable"
