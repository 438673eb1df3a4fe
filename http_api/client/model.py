"""The values the clients take and return: keys and values as bytes, items,
scan pages, and transactions (:class:`Compare`, :class:`Op`, :class:`TxnResult`).

Keys and values are ``bytes`` or ``str`` (encoded as UTF-8) going in; results
are ``bytes``. Nothing here does I/O.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from http_api.client.lease_model import HasLeaseId, lease_arg

BytesLike = bytes | bytearray | memoryview | str
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def to_bytes(data: BytesLike, what: str = "value") -> bytes:
    """``str`` as UTF-8, bytes-like objects as they are."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes or str, not {type(data).__name__}")


def int64_arg(value: int, what: str = "by") -> int:
    """``value`` if it is an int in the signed 64-bit range, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{what} must be a signed 64-bit integer")
    return value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True, slots=True)
class Item:
    key: bytes
    value: bytes
    version: int
    create_version: int


@dataclass(frozen=True, slots=True)
class ScanPage:
    items: list[Item]
    next: str | None
    """The cursor for the next page (``start_after=``), None on the last page."""


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction; build with the class methods."""

    key: bytes
    target: str  # "version" | "value" | "exists"
    expected: int | bytes | bool

    @classmethod
    def version(cls, key: BytesLike, version: int) -> Compare:
        """The key's version is ``version`` (0: the key does not exist)."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError("a compared version must be a non-negative integer")
        return cls(to_bytes(key, "key"), "version", version)

    @classmethod
    def value(cls, key: BytesLike, value: BytesLike) -> Compare:
        """The key exists and holds exactly ``value``."""
        return cls(to_bytes(key, "key"), "value", to_bytes(value))

    @classmethod
    def exists(cls, key: BytesLike, flag: bool = True) -> Compare:
        """The key exists (``flag`` True) or does not (False)."""
        return cls(to_bytes(key, "key"), "exists", bool(flag))

    def to_json(self) -> dict[str, Any]:
        expected = self.expected
        if isinstance(expected, bytes):
            return {"key": _b64(self.key), "value": _b64(expected)}
        return {"key": _b64(self.key), self.target: expected}


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction branch; build with the class methods."""

    kind: str  # "put" | "delete" | "get" | "incr" | "append"
    key: bytes
    value: bytes | None = None
    by: int | None = None  # incr only
    lease: int | None = None  # put only

    @classmethod
    def put(cls, key: BytesLike, value: BytesLike, *, lease: int | HasLeaseId | None = None) -> Op:
        """Set the key; with ``lease`` (an id or a lease), attached to that lease."""
        lease_id = None if lease is None else lease_arg(lease)
        return cls("put", to_bytes(key, "key"), to_bytes(value), lease=lease_id)

    @classmethod
    def incr(cls, key: BytesLike, by: int = 1) -> Op:
        """Add ``by`` (signed 64-bit) to the decimal integer at ``key`` (absent: 0).
        Its result's ``integer`` is the new value; a value that is not an integer,
        or an overflow, fails the whole transaction (NotAnIntegerError,
        IntegerOverflowError)."""
        return cls("incr", to_bytes(key, "key"), by=int64_arg(by))

    @classmethod
    def append(cls, key: BytesLike, value: BytesLike) -> Op:
        """Append ``value`` to the key's value (absent: create it)."""
        return cls("append", to_bytes(key, "key"), to_bytes(value))

    @classmethod
    def delete(cls, key: BytesLike) -> Op:
        return cls("delete", to_bytes(key, "key"))

    @classmethod
    def get(cls, key: BytesLike) -> Op:
        return cls("get", to_bytes(key, "key"))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"op": self.kind, "key": _b64(self.key)}
        if self.value is not None:
            body["value"] = _b64(self.value)
        if self.by is not None:
            body["by"] = self.by
        if self.lease is not None:
            body["lease"] = self.lease
        return body


@dataclass(frozen=True, slots=True)
class TxnOpResult:
    """What one op of the branch that ran did.

    put, append: ``version`` written and ``create_version``. incr: the same,
    ``integer`` the new value (and ``value`` it as the key now holds it:
    decimal text). delete: ``found``, ``version`` of the tombstone (0 when
    nothing was deleted). get: ``found`` and, when found, ``value``,
    ``version`` and ``create_version``.
    """

    op: str
    key: bytes
    found: bool
    version: int
    create_version: int = 0
    value: bytes | None = None
    integer: int | None = None

    def item(self) -> Item | None:
        """A found get as an :class:`Item`."""
        if self.op != "get" or not self.found or self.value is None:
            return None
        return Item(self.key, self.value, self.version, self.create_version)


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    """True when every compare held (the success branch ran)."""
    version: int
    results: tuple[TxnOpResult, ...]


@dataclass(frozen=True, slots=True)
class Alarm:
    """A raised alarm (GET /v1/alarms): ``member`` raised ``kind`` ("nospace") for
    ``reason`` at ``raised_ms`` (ms since the epoch, its raft entry's timestamp)."""

    member: str
    kind: str
    reason: str
    raised_ms: int


def alarms_of(body: Any) -> list[Alarm]:
    """The alarms of a GET /v1/alarms or POST /v1/alarms:disarm answer."""
    if not isinstance(body, dict) or not isinstance(body.get("alarms"), list):
        raise ValueError("not an alarms answer")
    return [
        Alarm(str(a["member"]), str(a["kind"]), str(a["reason"]), int(a["raised_ms"]))
        for a in body["alarms"]
    ]
