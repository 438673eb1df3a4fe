"""What every command handler shares: the context, the stop errors, the db handle.

A handler gets one :class:`Call` (the view, the :class:`CommandContext`, the
upper-cased command name and its arguments) and writes through
:meth:`Call.db`, a :class:`Db` bound to the namespace of a Redis db. Anything
the master would have refused (a wrong type, a bad number, a syntax error)
means the replica has diverged or the stream is corrupt, so it raises a
:class:`ReplicationStop` instead of guessing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from replication.redis.commands.numeric import NumberError, parse_double, parse_int
from replication.redis.layout import Layout, Meta
from replication.redis.objects import delete_key, load_meta, release_object, store_meta, sub_key
from replication.redis.view import View


class ReplicationStop(Exception):
    """The replicator must stop: applying this command would diverge from the master."""


class UnsupportedCommand(ReplicationStop):
    """A command (or form of it) the replicator cannot apply."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"unsupported Redis command {name}: {reason}")
        self.name = name
        self.reason = reason


class WrongTypeStop(ReplicationStop):
    """A command met a key of another type (the master would have refused it)."""

    def __init__(self, command: str, key: bytes, expected: str, found: str) -> None:
        super().__init__(
            f"{command} on key {key!r}: expected a {expected}, found a {found} (divergence)"
        )
        self.command = command
        self.key = key
        self.expected = expected
        self.found = found


class CommandError(ReplicationStop):
    """A command the master would have rejected (bad arguments, not a number, ...)."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(f"{command}: {message}")
        self.command = command


@dataclass
class CommandContext:
    """The state commands are applied in.

    ``db`` is the selected Redis db (SELECT changes it). ``offset`` is the
    replication end offset of the command being applied: object ids and
    namespaces created by it are ``c<offset>.<k>`` / ``f<offset>.<k>``, k =
    ``serial`` counting from 0 for each offset (it restarts by itself whenever
    ``offset`` changes, so replaying a command allocates the same ids; setting
    it to 0 before each command is harmless). ``now_ms`` only
    turns relative expiries (EX, PX, EXPIRE; a Redis 7 master sends absolute
    ones) into absolute ones. ``databases`` is the master's db count: FLUSHALL
    gives every db below it (and every db named in the dbs map) a new namespace.
    ``id_prefix`` goes before every id allocated (empty for a single master; a
    cluster shard's tag and epoch, so that shards sharing a generation never
    allocate the same id: replication/redis/cluster/).
    """

    layout: Layout
    db: int = 0
    offset: int = 0
    now_ms: int = 0
    databases: int = 16
    serial: int = 0
    serial_offset: int | None = field(default=None, repr=False)
    id_prefix: str = ""

    def _next(self) -> int:
        if self.serial_offset != self.offset:
            self.serial_offset, self.serial = self.offset, 0
        number = self.serial
        self.serial += 1
        return number

    def new_object(self) -> str:
        return f"{self.id_prefix}c{self.offset}.{self._next()}"

    def new_namespace(self) -> str:
        return f"{self.id_prefix}f{self.offset}.{self._next()}"


# --- the db -> namespace map -----------------------------------------------------


def load_dbs(view: View, layout: Layout) -> dict[int, str]:
    """The dbs map: only dbs whose namespace is not the default one."""
    raw = view.get(layout.dbs_key)
    if raw is None:
        return {}
    return {int(db): str(namespace) for db, namespace in json.loads(raw).items()}


def namespace_of(dbs: dict[int, str], db: int) -> str:
    return dbs.get(db, Layout.default_namespace(db))


def save_dbs(view: View, layout: Layout, dbs: dict[int, str]) -> None:
    kept = {str(db): ns for db, ns in sorted(dbs.items()) if ns != Layout.default_namespace(db)}
    view.put(layout.dbs_key, json.dumps(kept, separators=(",", ":")).encode())


# --- a Redis db, as seen by one command ----------------------------------------


@dataclass
class Db:
    """The keys of one Redis db (one namespace) for command ``command``."""

    view: View
    layout: Layout
    namespace: str
    command: str

    def get(self, key: bytes) -> Meta | None:
        return load_meta(self.view, self.layout, self.namespace, key)

    def typed(self, key: bytes, kind: str) -> Meta | None:
        """The key's metadata, None if absent; WrongTypeStop if not a ``kind``."""
        meta = self.get(key)
        if meta is not None and meta.type != kind:
            raise WrongTypeStop(self.command, key, kind, meta.type)
        return meta

    def put(self, key: bytes, meta: Meta) -> None:
        store_meta(self.view, self.layout, self.namespace, key, meta)

    def delete(self, key: bytes, meta: Meta | None = None) -> bool:
        return delete_key(self.view, self.layout, self.namespace, key, meta)

    def forget(self, key: bytes) -> None:
        """Remove only the metadata record (its object moves to another key)."""
        self.view.delete(self.layout.meta_key(self.namespace, key))

    def release(self, meta: Meta) -> None:
        """Hand ``meta``'s object (if any) to the sweeper."""
        release_object(self.view, self.layout, meta)

    def save(self, key: bytes, meta: Meta) -> None:
        """Store a container's metadata, or delete the key if it became empty
        (streams excepted: Redis keeps empty streams)."""
        if meta.type != "stream" and meta.size == 0:
            self.delete(key, meta)
        else:
            self.put(key, meta)

    def sub(self, meta: Meta, name: bytes) -> bytes:
        return sub_key(self.layout, meta, name)

    def new_container(self, kind: str, ctx: CommandContext) -> Meta:
        """Metadata for a new, empty container of type ``kind`` (not stored yet)."""
        return Meta(kind, None, obj=ctx.new_object())


@dataclass
class Call:
    """One command being applied."""

    view: View
    ctx: CommandContext
    name: str
    args: list[bytes]

    def db(self, number: int | None = None) -> Db:
        """The current db (or db ``number``)."""
        chosen = self.ctx.db if number is None else number
        namespace = namespace_of(load_dbs(self.view, self.ctx.layout), chosen)
        return Db(self.view, self.ctx.layout, namespace, self.name)

    def error(self, message: str) -> CommandError:
        return CommandError(self.name, message)

    def arity(self, minimum: int, maximum: int | None = None) -> None:
        """Check the number of arguments (not counting the command name)."""
        count = len(self.args)
        if count < minimum or (maximum is not None and count > maximum):
            raise self.error(f"wrong number of arguments ({count})")

    def pairs(self, start: int) -> list[tuple[bytes, bytes]]:
        """args[start:] as (a, b) pairs; at least one, none odd."""
        rest = self.args[start:]
        if not rest or len(rest) % 2:
            raise self.error("wrong number of arguments")
        return list(zip(rest[::2], rest[1::2], strict=True))

    def integer(self, raw: bytes) -> int:
        try:
            return parse_int(raw)
        except NumberError:
            raise self.error("value is not an integer or out of range") from None

    def option(self, raw: bytes) -> str:
        return raw.decode("latin-1").upper()


Handler = Callable[[Call], None]


def relative_expiry(call: Call, raw: bytes, unit_ms: int) -> int:
    """An absolute expiry from EX/PX-style seconds/milliseconds (must be > 0)."""
    amount = call.integer(raw)
    if amount <= 0:
        raise call.error("invalid expire time")
    return call.ctx.now_ms + amount * unit_ms


def absolute_expiry(call: Call, raw: bytes, unit_ms: int) -> int:
    """An absolute expiry from EXAT/PXAT-style Unix seconds/milliseconds (> 0)."""
    amount = call.integer(raw)
    if amount <= 0:
        raise call.error("invalid expire time")
    return amount * unit_ms


def check_timeout(call: Call, raw: bytes) -> None:
    """A blocking command's timeout: ignored, but it must be a float >= 0."""
    try:
        if parse_double(raw) >= 0:
            return
    except NumberError:
        pass
    raise call.error("timeout is not a float or out of range")


def index_range(size: int, start: int, stop: int) -> tuple[int, int]:
    """The [first, last) indexes selected by LTRIM/ZRANGE-style ``start stop``
    (negative indexes count from the end)."""
    if start < 0:
        start += size
    if stop < 0:
        stop += size
    start = max(start, 0)
    if start > stop or start >= size:
        return 0, 0
    return start, min(stop, size - 1) + 1
