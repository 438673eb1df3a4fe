"""Apply one command of a Redis 7.0 master's replication stream to rkv keys.

:func:`apply_command` looks the command up in a dispatch table built from the
per-family modules (keys, strings, hashes,
sets, lists, zsets, zset_stores,
streams) and runs its handler against a :class:`View` in a
:class:`CommandContext`. Redis 7 propagates effects, not commands (SET EX
arrives as SET PXAT, EXPIRE as PEXPIREAT, SPOP as SREM, INCRBYFLOAT as SET
KEEPTTL, scripts as the commands they ran), but the original forms are
handled too where their outcome is certain.

Ignored (no keyspace effect on a replica): PING, REPLCONF, MULTI, EXEC and
DISCARD (the replicator groups transactions itself), FUNCTION,
SCRIPT, the pub/sub family, and the consumer-group commands (groups are not
replicated). Anything else raises :class:`UnsupportedCommand`, so the
replicator stops with a clear error instead of silently diverging.
"""

from __future__ import annotations

from replication.redis.commands import (
    hashes,
    keys,
    lists,
    sets,
    streams,
    strings,
    zset_stores,
    zsets,
)
from replication.redis.commands.common import (
    Call,
    CommandContext,
    CommandError,
    Handler,
    ReplicationStop,
    UnsupportedCommand,
    WrongTypeStop,
)
from replication.redis.view import View

__all__ = [
    "HANDLERS",
    "IGNORED",
    "CommandContext",
    "CommandError",
    "ReplicationStop",
    "UnsupportedCommand",
    "WrongTypeStop",
    "apply_command",
]

IGNORED = frozenset(
    {
        "PING",
        "REPLCONF",
        "MULTI",
        "EXEC",
        "DISCARD",
        "FUNCTION",
        "SCRIPT",
        "PUBLISH",
        "SPUBLISH",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "PSUBSCRIBE",
        "PUNSUBSCRIBE",
        "SSUBSCRIBE",
        "SUNSUBSCRIBE",
        "PUBSUB",
    }
)

HANDLERS: dict[str, Handler] = {
    **keys.HANDLERS,
    **strings.HANDLERS,
    **hashes.HANDLERS,
    **sets.HANDLERS,
    **lists.HANDLERS,
    **zsets.HANDLERS,
    **zset_stores.HANDLERS,
    **streams.HANDLERS,
}

_EXPLAINED = {
    "EVAL": "scripts are propagated as their effects by Redis 7; a script itself cannot be run",
    "EVALSHA": "scripts are propagated as their effects by Redis 7; a script itself cannot be run",
    "FCALL": "functions are propagated as their effects by Redis 7",
    "RESTORE": "RESTORE carries a serialized value (DUMP format) that is not parsed",
    "SORT": "SORT ... STORE is not implemented",
    "PFADD": "HyperLogLog commands are not implemented",
    "PFMERGE": "HyperLogLog commands are not implemented",
}


def apply_command(view: View, ctx: CommandContext, argv: list[bytes]) -> None:
    """Apply ``argv`` (name and arguments, as the master sent them) through ``view``.

    Raises a :class:`ReplicationStop` (UnsupportedCommand, WrongTypeStop,
    CommandError) when the command cannot be applied faithfully; the view may
    then hold part of the command's writes, so the caller must discard the
    batch it was collecting.
    """
    if not argv:
        raise CommandError("(empty)", "an empty command")
    name = argv[0].decode("latin-1").upper()
    if name in IGNORED:
        return
    handler = HANDLERS.get(name)
    if handler is None:
        reason = _EXPLAINED.get(name, "not implemented by the rkv Redis replicator")
        raise UnsupportedCommand(name, reason)
    handler(Call(view, ctx, name, list(argv[1:])))
