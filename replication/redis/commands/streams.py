"""Stream commands: XADD, XDEL, XTRIM, XSETID, and XGROUP CREATE ... MKSTREAM.

A stream is an object with one sub-key per entry (``<ms:016x>-<seq:016x>``,
so entries scan in id order); the metadata record holds the count, the last
id, entries-added, the max deleted id and the first id. Redis keeps empty
streams, so a stream is never deleted for being empty.

What the master sends: XADD carries the concrete id (``*`` and ``ms-*`` are
rewritten), and approximate trimming (``MAXLEN ~ n``, ``MINID ~ id``) is
rewritten to exact trimming to the resulting length/first id (``=``), with
any LIMIT left in place but ignored by replicas (Redis' streamRewriteApprox-
Specifier / streamRewriteTrimArgument; mustObeyClient zeroes the limit). So
trimming here is exact and LIMIT is ignored; ``~`` and ``*`` cannot be
reproduced and raise UnsupportedCommand. Consumer groups are not replicated:
XGROUP (except that CREATE ... MKSTREAM creates an empty stream), XREADGROUP,
XACK, XCLAIM, XAUTOCLAIM change only group state and are ignored.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from replication.redis.commands.common import Call, Db, Handler, UnsupportedCommand
from replication.redis.layout import Meta, encode_fields, parse_stream_id_key, stream_id_key
from replication.redis.objects import StreamId, StreamValue, set_stream_state, stream_state

_U64_MAX = (1 << 64) - 1
_ID = re.compile(rb"([0-9]+)(?:-([0-9]+|\*))?")


@dataclass
class Trim:
    """An exact trim: keep at most ``maxlen`` entries, or none below ``minid``."""

    maxlen: int | None = None
    minid: StreamId | None = None


def parse_id(call: Call, raw: bytes, allow_star_seq: bool = False) -> tuple[StreamId, bool]:
    """(id, seq_given) of a strict stream id ("ms", "ms-seq", "ms-*" for XADD)."""
    match = _ID.fullmatch(raw)
    seq_raw = None if match is None else match.group(2)
    if match is None or (seq_raw == b"*" and not allow_star_seq):
        raise call.error("Invalid stream ID specified as stream command argument")
    ms = int(match.group(1))
    seq = 0 if seq_raw in (None, b"*") else int(seq_raw)
    if ms > _U64_MAX or seq > _U64_MAX:
        raise call.error("Invalid stream ID specified as stream command argument")
    return (ms, seq), seq_raw != b"*"


def _trim_option(call: Call, args: list[bytes], trim: Trim) -> int:
    """Parse MAXLEN/MINID [=|~] threshold at args[0]; returns arguments used."""
    if trim.maxlen is not None or trim.minid is not None:
        raise call.error(
            "syntax error, MAXLEN and MINID options at the same time are not compatible"
        )
    used = 1
    if len(args) > 2 and args[1] in (b"~", b"="):
        if args[1] == b"~":
            raise UnsupportedCommand(
                call.name, "approximate trimming (~) depends on the master's node layout"
            )
        used = 2
    if call.option(args[0]) == "MAXLEN":
        trim.maxlen = call.integer(args[used])
        if trim.maxlen < 0:
            raise call.error("The MAXLEN argument must be >= 0.")
    else:
        trim.minid = parse_id(call, args[used])[0]
    return used + 1


def _parse_options(call: Call, args: list[bytes], xadd: bool) -> tuple[Trim, bool, int]:
    """XADD/XTRIM options from args: (trim, nomkstream, index of the id for XADD)."""
    trim, nomkstream, limit, index = Trim(), False, False, 0
    while index < len(args):
        word = call.option(args[index])
        more = len(args) - index - 1
        if word in ("MAXLEN", "MINID") and more:
            index += _trim_option(call, args[index:], trim)
        elif word == "LIMIT" and more:
            if call.integer(args[index + 1]) < 0:
                raise call.error("The LIMIT argument must be >= 0.")
            limit, index = True, index + 2
        elif xadd and word == "NOMKSTREAM":
            nomkstream, index = True, index + 1
        elif xadd:
            break
        else:
            raise call.error("syntax error")
    has_trim = trim.maxlen is not None or trim.minid is not None
    if (limit and not has_trim) or (not xadd and not has_trim):
        raise call.error("syntax error, a trimming strategy is needed")
    return trim, nomkstream, index


def _next_id(call: Call, state: StreamValue, given: StreamId, seq_given: bool) -> StreamId:
    if not seq_given and state.last_id[0] == given[0]:
        if state.last_id[1] == _U64_MAX:
            raise call.error("The ID specified in XADD is equal or smaller than the top item")
        given = (given[0], state.last_id[1] + 1)
    if given <= state.last_id:
        raise call.error(
            "The ID specified in XADD is equal or smaller than the target stream top item"
        )
    return given


def _xadd(call: Call) -> None:
    call.arity(2)
    key, args = call.args[0], call.args[1:]
    trim, nomkstream, index = _parse_options(call, args, xadd=True)
    if index >= len(args) or args[index] == b"*":
        raise UnsupportedCommand(call.name, "an auto-generated id (*): the master sends the id")
    given, seq_given = parse_id(call, args[index], allow_star_seq=True)
    pairs = list(zip(args[index + 1 :: 2], args[index + 2 :: 2], strict=False))
    if not pairs or (len(args) - index - 1) % 2:
        raise call.error("wrong number of arguments")
    if seq_given and given == (0, 0):
        raise call.error("The ID specified in XADD must be greater than 0-0")
    db = call.db()
    meta = db.typed(key, "stream")
    if meta is None:
        if nomkstream:
            return
        meta = db.new_container("stream", call.ctx)
    state = stream_state(meta)
    entry_id = _next_id(call, state, given, seq_given)
    db.view.put(db.sub(meta, stream_id_key(*entry_id)), encode_fields(pairs))
    meta.count += 1
    state.entries_added += 1
    state.last_id = entry_id
    if meta.count == 1:
        state.first_id = entry_id
    _trim(db, meta, state, trim)
    set_stream_state(meta, state)
    db.put(key, meta)


def _trim(db: Db, meta: Meta, state: StreamValue, trim: Trim) -> None:
    """Delete the oldest entries as ``trim`` says; keeps count and first id right."""
    assert meta.obj is not None
    prefix = db.layout.object_prefix(meta.obj)
    if trim.maxlen is not None:
        excess = max(0, meta.count - trim.maxlen)
        head = list(itertools.islice(db.view.scan(prefix), excess + 1))
        doomed = [key for key, _ in head[:excess]]
    elif trim.minid is not None:
        minimum = stream_id_key(*trim.minid)
        head = []
        for key, value in db.view.scan(prefix):
            head.append((key, value))
            if key[len(prefix) :] >= minimum:
                break
        doomed = [key for key, _ in head if key[len(prefix) :] < minimum]
    else:
        return
    for key in doomed:
        db.view.delete(key)
    if doomed:
        meta.count -= len(doomed)
        rest = head[len(doomed) :]
        state.first_id = parse_stream_id_key(rest[0][0][len(prefix) :]) if rest else (0, 0)


def _first_id(db: Db, meta: Meta) -> StreamId:
    assert meta.obj is not None
    prefix = db.layout.object_prefix(meta.obj)
    for key, _ in db.view.scan(prefix):
        return parse_stream_id_key(key[len(prefix) :])
    return (0, 0)


def _xdel(call: Call) -> None:
    call.arity(2)
    ids = [parse_id(call, raw)[0] for raw in call.args[1:]]
    db = call.db()
    meta = db.typed(call.args[0], "stream")
    if meta is None:
        return
    state = stream_state(meta)
    deleted, first_deleted = 0, False
    for entry_id in ids:
        sub = db.sub(meta, stream_id_key(*entry_id))
        if db.view.get(sub) is None:
            continue
        db.view.delete(sub)
        deleted += 1
        first_deleted = first_deleted or entry_id == state.first_id
        state.max_deleted_id = max(state.max_deleted_id, entry_id)
    if not deleted:
        return
    meta.count -= deleted
    if meta.count == 0:
        state.first_id = (0, 0)
    elif first_deleted:
        state.first_id = _first_id(db, meta)
    set_stream_state(meta, state)
    db.put(call.args[0], meta)


def _xtrim(call: Call) -> None:
    call.arity(3)
    trim, _, _ = _parse_options(call, call.args[1:], xadd=False)
    db = call.db()
    meta = db.typed(call.args[0], "stream")
    if meta is None:
        return
    state = stream_state(meta)
    _trim(db, meta, state, trim)
    set_stream_state(meta, state)
    db.put(call.args[0], meta)


def _xsetid(call: Call) -> None:
    """XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]. (Redis also
    checks last-id against the top entry; that needs a reverse scan, and the
    master has checked it.)"""
    call.arity(2)
    last_id = parse_id(call, call.args[1])[0]
    added, max_deleted = None, None
    rest = call.args[2:]
    while rest:
        word = call.option(rest[0])
        if word == "ENTRIESADDED" and len(rest) > 1:
            added = call.integer(rest[1])
            if added < 0:
                raise call.error("entries_added must be positive")
        elif word == "MAXDELETEDID" and len(rest) > 1:
            max_deleted = parse_id(call, rest[1])[0]
            if last_id < max_deleted:
                raise call.error("The ID specified in XSETID is smaller than max_deleted_entry_id")
        else:
            raise call.error("syntax error")
        rest = rest[2:]
    db = call.db()
    meta = db.typed(call.args[0], "stream")
    if meta is None:
        raise call.error("no such key")
    if added is not None and meta.count > added:
        raise call.error("The entries_added specified in XSETID is smaller than the stream length")
    state = stream_state(meta)
    state.last_id = last_id
    if added is not None:
        state.entries_added = added
    if max_deleted is not None and max_deleted != (0, 0):
        state.max_deleted_id = max_deleted
    set_stream_state(meta, state)
    db.put(call.args[0], meta)


def _xgroup(call: Call) -> None:
    """Only XGROUP CREATE key group id MKSTREAM changes the keyspace."""
    call.arity(1)
    if call.option(call.args[0]) != "CREATE" or len(call.args) < 4:
        return
    if not any(call.option(arg) == "MKSTREAM" for arg in call.args[4:]):
        return
    db = call.db()
    if db.get(call.args[1]) is None:
        meta = db.new_container("stream", call.ctx)
        set_stream_state(meta, StreamValue())
        db.put(call.args[1], meta)


def _group_only(call: Call) -> None:
    """Consumer-group state is not replicated."""


HANDLERS: dict[str, Handler] = {
    "XADD": _xadd,
    "XDEL": _xdel,
    "XTRIM": _xtrim,
    "XSETID": _xsetid,
    "XGROUP": _xgroup,
    "XREADGROUP": _group_only,
    "XACK": _group_only,
    "XCLAIM": _group_only,
    "XAUTOCLAIM": _group_only,
}
