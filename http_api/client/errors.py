"""What the rkv clients raise on purpose.

Each exception carries the server's ``code`` and ``message``, the HTTP
``status`` (None when no answer came) and the node ``url``::

    RkvClientError
    ├── NotFoundError             404: a user, role, grant or endpoint that does not exist
    │   ├── KeyNotFoundError      404 not_found: the key
    │   ├── LeaseNotFoundError    404 lease_not_found / lease_expired: the lease is gone
    │   └── NoElectionLeaderError 404 no_leader: nobody leads the election
    ├── VersionConflictError      412 version_conflict; .current_version
    ├── InvalidRequestError       400 (invalid_key, reserved_key, not_utf8, ...)
    ├── PayloadTooLargeError      413 payload_too_large
    ├── AuthenticationError       401: no, wrong or expired credentials (unauthenticated,
    │                             invalid_credentials, invalid_token, token_expired)
    ├── PermissionDeniedError     403 permission_denied: the user lacks the permission named
    ├── TooManyRequestsError      429: a limit (``code`` names it: too_many_failed_logins,
    │                             too_many_users, ...); .retry_after
    ├── ConflictError             409: the key's state or the producer's refuses the write
    │   ├── NotAnIntegerError     not_an_integer: incr of a value that is not a decimal integer
    │   ├── IntegerOverflowError  integer_overflow: incr past the signed 64-bit range
    │   ├── Fenced                fenced: the write's Rkv-Fencing token is not the lock's
    │   │                         holder's now; .token (the holder's, None if nobody)
    │   ├── LockHeldError         lock_held: the lock was not had within the wait; .token
    │   ├── NotLockHolderError    not_lock_holder: unlock, resign or proclaim without holding
    │   └── ProducerError         an idempotent producer's write refused before it was applied;
    │       │                     .outcome_unknown (see http_api.client.producer)
    │       ├── ProducerFencedError   producer_fenced: a newer epoch of its transactional id
    │       ├── UnknownProducerError  unknown_producer: never initialised, or expired
    │       └── SequenceError         out_of_order_sequence / duplicate_sequence_too_old
    ├── NoSpaceError              507 no_space: a member raised a NOSPACE alarm; writes that
    │                             add data are refused until an operator disarms it
    ├── UnavailableError          503: the cluster cannot serve it now; .retry_after
    │   ├── NotAppliedError       not_applied / no_leader: the write was not applied
    │   ├── UnknownOutcomeError   the write may or may not have been applied
    │   └── OverloadedError       overloaded: too many requests in flight
    ├── ClusterUnreachableError   no node could be reached (code "unreachable")
    │   └── TlsError              tls_failed: the TLS handshake failed (an unknown CA, a
    │                             host name the certificate does not name, TLS spoken to a
    │                             plain-HTTP port); not retried
    ├── LoadInterrupted           a bulk load stopped (http_api.client.bulk_load): .cause (the
    │                             error above it stands for), .progress (what is committed:
    │                             .lines to skip to resume), .line (the line that failed)
    └── LeaseLost                 raised by the client itself on leaving ``with
        │                         client.lease(...)``: the lease ended or could not be
        │                         kept alive for its TTL while the block ran; .lease_id
        └── LockLost              the same for ``with client.lock(...)`` and an
                                  election's leadership; .name, .token

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


class NotFoundError(RkvClientError):
    """404: what the request names does not exist (``code``: user_not_found,
    role_not_found, role_not_granted, permission_not_granted, no_such_endpoint)."""

    default_code = "not_found"


class KeyNotFoundError(NotFoundError):
    default_code = "not_found"


class LeaseNotFoundError(NotFoundError):
    """404: the lease does not exist (``lease_not_found``) or has ended (``lease_expired``:
    it expired or was revoked, and the node still remembers it)."""

    default_code = "lease_not_found"


class NoElectionLeaderError(NotFoundError):
    """404 ``no_leader``: nobody leads the election now."""

    default_code = "no_leader"


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


class AuthenticationError(RkvClientError):
    """401: the node wants credentials, or refused the ones sent (the server's code
    says which: unauthenticated, invalid_credentials, invalid_token, token_expired)."""

    default_code = "unauthenticated"


class PermissionDeniedError(RkvClientError):
    """403: the credentials are good but lack the permission the message names."""

    default_code = "permission_denied"


class _RetryLater(RkvClientError):
    """An error the server said to retry: ``retry_after``, seconds it asked to wait
    (None when it did not say)."""

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


class TooManyRequestsError(_RetryLater):
    """429: a bounded resource is full, or too many failed logins (``code`` names which)."""

    default_code = "limit_reached"


class ConflictError(RkvClientError):
    """409: the write conflicts with the key's state or with the producer's."""

    default_code = "conflict"


class NotAnIntegerError(ConflictError):
    default_code = "not_an_integer"


class IntegerOverflowError(ConflictError):
    default_code = "integer_overflow"


class _WithToken(ConflictError):
    """A refusal naming the lock's current fencing token (None: nobody holds it)."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
        token: int | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.token = token


class Fenced(_WithToken):
    """409 ``fenced``: the write carried ``Rkv-Fencing: NAME=TOKEN`` and lock NAME is not
    held with that token now (a newer holder took it, or its lease ended); nothing was
    written. ``token``: the current holder's token, None when nobody holds it."""

    default_code = "fenced"


class LockHeldError(_WithToken):
    """409 ``lock_held``: the lock (or an election's leadership) was not had within the
    request's wait; ``token`` is the holder's."""

    default_code = "lock_held"


class NotLockHolderError(ConflictError):
    """409 ``not_lock_holder``: unlock, resign or proclaim by a lease that does not hold
    the lock (with that token)."""

    default_code = "not_lock_holder"


class ProducerError(ConflictError):
    """An idempotent producer's write was refused before it was applied.

    ``outcome_unknown`` is True when an earlier attempt of the same write (same
    sequence, an answer that never came) may have been applied before this
    refusal: then the write may or may not have taken effect, and it was not
    sent again.
    """

    default_code = "producer_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.outcome_unknown = outcome_unknown


class ProducerFencedError(ProducerError):
    """Its transactional id was initialised again: this epoch can write no more."""

    default_code = "producer_fenced"


class UnknownProducerError(ProducerError):
    """The producer was never initialised, or expired after being idle."""

    default_code = "unknown_producer"


class SequenceError(ProducerError):
    """The sequence skips ahead (``out_of_order_sequence``), or is older than the
    results the server keeps (``duplicate_sequence_too_old``)."""

    default_code = "out_of_order_sequence"


class NoSpaceError(RkvClientError):
    """507 ``no_space``: a member's disk is full or over its quota and it raised a
    NOSPACE alarm; the cluster refuses writes that add data (deletes and reads go on)
    until an operator frees space and disarms it (:meth:`disarm_alarm`). Not retried."""

    default_code = "no_space"


class UnavailableError(_RetryLater):
    default_code = "unavailable"


class NotAppliedError(UnavailableError):
    default_code = "not_applied"


class UnknownOutcomeError(UnavailableError):
    default_code = "unknown_outcome"


class OverloadedError(UnavailableError):
    default_code = "overloaded"


class ClusterUnreachableError(RkvClientError):
    default_code = "unreachable"


class TlsError(ClusterUnreachableError):
    """The TLS handshake with a node failed: its certificate is not signed by the CA
    given (or the system's), does not name the host in the URL, or the URL's scheme
    does not match what the port speaks. Retrying would fail the same way."""

    default_code = "tls_failed"


class LeaseLost(RkvClientError):
    """Raised on leaving ``with client.lease(...)`` when the lease was lost while the
    block ran: a keepalive answered that it had ended (``lease_expired``,
    ``lease_not_found``, ``lease_not_owned``: the ``code``), or none was acknowledged
    for a whole TTL (``keepalive_failed``), so the cluster may have expired it. What
    was attached to it may be gone."""

    default_code = "lease_lost"

    def __init__(
        self,
        message: str,
        *,
        lease_id: int,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.lease_id = lease_id


class LockLost(LeaseLost):
    """Raised on leaving ``with client.lock(...)`` (or an election, by its leader) when
    the lease behind the lock was lost while the block ran: someone else may hold the
    lock now, and writes fenced with ``token`` are refused."""

    default_code = "lock_lost"

    def __init__(
        self,
        message: str,
        *,
        lease_id: int,
        name: str,
        token: int,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message, lease_id=lease_id, code=code, status=status, url=url)
        self.name = name
        self.token = token
