"""A streaming parser for Redis RDB payloads (RDB versions 1 to 11, Redis 7.2).

Use::

    with open("dump.rdb", "rb") as f:
        for event in RdbParser(f, total_length=os.fstat(f.fileno()).st_size):
            if isinstance(event, KeyValue):
                ...

The parser reads the payload a chunk at a time and yields one event per
record (:class:`Aux`, :class:`Function`, :class:`SelectDb`, :class:`ResizeDb`,
:class:`KeyValue`, then :class:`End`); any problem with the bytes raises
:class:`RdbError` with the byte position, and a record that would take more
memory once decoded than ``max_value_bytes`` :class:`RdbLimitError`.
"""

from .buffer import BinaryReadable
from .crc64 import crc64
from .errors import RdbError, RdbLimitError
from .model import (
    Aux,
    End,
    Event,
    Function,
    KeyValue,
    PendingEntry,
    ResizeDb,
    SelectDb,
    Stream,
    StreamConsumer,
    StreamEntry,
    StreamGroup,
    StreamId,
    Value,
)
from .parser import MAX_VERSION, RdbParser, parse_rdb
from .reader import DEFAULT_MAX_VALUE_BYTES, ELEMENT_BYTES

__all__ = [
    "DEFAULT_MAX_VALUE_BYTES",
    "ELEMENT_BYTES",
    "MAX_VERSION",
    "Aux",
    "BinaryReadable",
    "End",
    "Event",
    "Function",
    "KeyValue",
    "PendingEntry",
    "RdbError",
    "RdbLimitError",
    "RdbParser",
    "ResizeDb",
    "SelectDb",
    "Stream",
    "StreamConsumer",
    "StreamEntry",
    "StreamGroup",
    "StreamId",
    "Value",
    "crc64",
    "parse_rdb",
]
