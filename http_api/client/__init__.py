"""Python clients for rkv's REST API: :class:`RkvClient` (blocking, standard
library only) and :class:`AsyncRkvClient` (asyncio, aiohttp's client).

Both take one node URL or several, find the leader through ``GET /v1/status``
and send writes (and linearizable reads) there; ``stale`` reads go to the
first reachable node in the order given. They learn the other members' URLs
from the status, so one reachable URL is enough (every node's advertised URL
must be reachable from the client). Keys and values are ``bytes`` or ``str``
(encoded as UTF-8); results are ``bytes``.

Retries are bounded by :class:`RetryPolicy`; a write is retried only when it
was certainly not applied, otherwise :class:`UnknownOutcomeError` leaves the
decision to the caller (read the key back, or retry when the write is
idempotent). The rules: :mod:`http_api.client.rules`. The exceptions, each
with the server's ``code`` and ``message``, the HTTP ``status`` and the node
``url``: :mod:`http_api.client.errors`.

``client.producer()`` (``await client.producer()`` on the async client)
registers an idempotent producer: :class:`Producer` / :class:`AsyncProducer`
stamp each write with a producer id, epoch and sequence, so they can resend
it on any unknown outcome and the server applies it once
(:mod:`http_api.client.producer` has the rules).

``credentials=Credentials(cafile=..., user=..., password=...)`` (or ``token=``,
``certfile=``/``keyfile=`` for mutual TLS) gives either client the CA that
``https://`` nodes are verified against and who it is; a 401 raises
:class:`AuthenticationError`, a 403 :class:`PermissionDeniedError`, a failed
handshake :class:`TlsError` at once (never retried).

Users, roles and permissions (``/v1/auth/*``) are managed with methods of
either client: ``token``, ``auth_enable``/``auth_disable``/``auth_status``,
``user_add``/``user_delete``/``user_passwd``/``user_grant_role``/
``user_revoke_role``/``users``/``user``, ``role_add``/``role_delete``/
``role_grant``/``role_revoke``/``roles``/``role``
(:mod:`http_api.client.auth_methods`; values in :mod:`http_api.client.auth_model`).

Leases, locks and elections (docs/LEASES.md): ``client.lease(ttl)`` grants a
lease kept alive in the background (:class:`KeptLease`); ``with
client.lock(name, ttl=10) as held:`` holds a lock (:class:`HeldLock`) whose
``held.fencing`` makes a write (``put``, ``delete``, ``incr``, ``append``,
``txn``: ``fencing=held``) apply only while the lock is still held (else
:class:`Fenced`); ``client.election(name)`` is an :class:`Election`. A lease
lost meanwhile sets ``lost`` and leaving the block raises :class:`LeaseLost` /
:class:`LockLost`. The single calls (``grant_lease``, ``keepalive``,
``revoke``, ``lock_acquire``, ``campaign``, ``observe``...):
:mod:`http_api.client.lease_methods`.

Bulk load (POST /v1/kv:load): ``client.load(pairs or path, skip=N,
progress=callback)`` streams (key, value) pairs or a JSON Lines file and returns
a :class:`LoadProgress`; a load that stops raises :class:`LoadInterrupted`,
whose ``progress.lines`` is what to pass as ``skip`` to resume
(:mod:`http_api.client.bulk_load`, ``sync_load``).

Neither client is safe to share between threads; the async one belongs to the
event loop that first used it. Close them (or use ``with`` / ``async with``).

Modules: ``errors`` (the exception tree), ``model`` (Item, ScanPage, Compare,
Op, TxnResult), ``wire`` (URLs, requests and answers, I/O-free), ``rules``
(leader and retry rules, I/O-free), ``operations`` (each call as an I/O-free
plan, and what both clients share), ``producer`` (an idempotent producer's
rules, I/O-free), ``auth_model``, ``auth_plans`` and ``auth_methods`` (users
and roles), ``lease_model``, ``lease_plans``, ``lease_keeper``, ``observing``,
``locks``, ``elections``, ``lease_methods`` (leases, locks and elections;
``async_locks`` and ``async_lease_methods`` their asyncio twins),
``sync_client`` (and ``sync_producer``) and ``async_client``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from http_api.client.async_locks import AsyncElection, AsyncHeldLock, AsyncKeptLease
from http_api.client.auth_model import AuthStatus, Permission, Role, User
from http_api.client.bulk_load import LoadInterrupted, LoadProgress
from http_api.client.credentials import Credentials
from http_api.client.elections import Election
from http_api.client.errors import (
    AuthenticationError,
    ClusterUnreachableError,
    ConflictError,
    Fenced,
    IntegerOverflowError,
    InvalidRequestError,
    KeyNotFoundError,
    LeaseLost,
    LeaseNotFoundError,
    LockHeldError,
    LockLost,
    NoElectionLeaderError,
    NoSpaceError,
    NotAnIntegerError,
    NotAppliedError,
    NotFoundError,
    NotLockHolderError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ProducerError,
    ProducerFencedError,
    RkvClientError,
    SequenceError,
    TlsError,
    TooManyRequestsError,
    UnavailableError,
    UnknownOutcomeError,
    UnknownProducerError,
    VersionConflictError,
)
from http_api.client.lease_model import Fencing, Lease, LeaseInfo, LockHolder, LockInfo, Renewal
from http_api.client.locks import HeldLock, KeptLease
from http_api.client.model import Alarm, Compare, Item, Op, ScanPage, TxnOpResult, TxnResult
from http_api.client.model import BytesLike as BytesLike
from http_api.client.model import to_bytes as to_bytes
from http_api.client.operations import _Core as _Core
from http_api.client.producer import DEFAULT_DEADLINE as DEFAULT_DEADLINE
from http_api.client.producer import producer_headers as producer_headers
from http_api.client.rules import DISCOVERY_TIMEOUT as DISCOVERY_TIMEOUT
from http_api.client.rules import IDLE_RECONNECT as IDLE_RECONNECT
from http_api.client.rules import MAX_REDIRECTS as MAX_REDIRECTS
from http_api.client.rules import SAFE_WRITE_RETRY_CODES as SAFE_WRITE_RETRY_CODES
from http_api.client.rules import RetryPolicy
from http_api.client.sync_client import RkvClient
from http_api.client.sync_producer import Producer
from http_api.client.wire import CONSISTENCY_LEVELS as CONSISTENCY_LEVELS
from http_api.client.wire import DEFAULT_URL as DEFAULT_URL
from http_api.client.wire import _Failure as _Failure
from http_api.client.wire import _Reply as _Reply
from http_api.client.wire import _Send as _Send
from http_api.client.wire import _Sleep as _Sleep
from http_api.client.wire import error_from_reply as error_from_reply
from http_api.client.wire import key_path as key_path
from http_api.client.wire import normalize_url as normalize_url
from http_api.client.wire import parse_urls as parse_urls

if TYPE_CHECKING:
    from http_api.client.async_client import AsyncProducer, AsyncRkvClient

__all__ = [
    "Alarm",
    "AsyncElection",
    "AsyncHeldLock",
    "AsyncKeptLease",
    "AsyncProducer",
    "AsyncRkvClient",
    "AuthStatus",
    "AuthenticationError",
    "ClusterUnreachableError",
    "Compare",
    "ConflictError",
    "Credentials",
    "Election",
    "Fenced",
    "Fencing",
    "HeldLock",
    "IntegerOverflowError",
    "InvalidRequestError",
    "Item",
    "KeptLease",
    "KeyNotFoundError",
    "Lease",
    "LeaseInfo",
    "LeaseLost",
    "LeaseNotFoundError",
    "LoadInterrupted",
    "LoadProgress",
    "LockHeldError",
    "LockHolder",
    "LockInfo",
    "LockLost",
    "NoElectionLeaderError",
    "NoSpaceError",
    "NotAnIntegerError",
    "NotAppliedError",
    "NotFoundError",
    "NotLockHolderError",
    "Op",
    "OverloadedError",
    "PayloadTooLargeError",
    "Permission",
    "PermissionDeniedError",
    "Producer",
    "ProducerError",
    "ProducerFencedError",
    "Renewal",
    "RetryPolicy",
    "RkvClient",
    "RkvClientError",
    "Role",
    "ScanPage",
    "SequenceError",
    "TlsError",
    "TooManyRequestsError",
    "TxnOpResult",
    "TxnResult",
    "UnavailableError",
    "UnknownOutcomeError",
    "UnknownProducerError",
    "User",
    "VersionConflictError",
]


def __getattr__(name: str) -> Any:
    # AsyncRkvClient and AsyncProducer are imported on first use: they need aiohttp,
    # which users of the blocking client (the `rkv` command among them) should not
    # have to load.
    if name in ("AsyncRkvClient", "AsyncProducer"):
        from http_api.client import async_client  # noqa: PLC0415

        return getattr(async_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
