"""Where a user key sits in LMDB's order: pure functions, no lmdb import.

LMDB keys are at most 511 bytes; rkv keys up to 4096. A key of up to 511 bytes
is its own LMDB key. A longer key is stored under its first
:data:`LONG_KEY_PREFIX` (495) bytes followed by a 16-byte BLAKE2b digest of the
whole key, so long keys sharing those 495 bytes are ordered by digest among
themselves and byte order holds everywhere else. A bound of at most 495 bytes
(an audit's split point) therefore falls between keys exactly where byte order
puts it. The snapshot format, the audit and spark_tools/ use these functions
without opening LMDB.
"""

from __future__ import annotations

import hashlib

LMDB_KEY_LIMIT = 511
"""LMDB's longest key."""
LONG_KEY_PREFIX = 495
"""How much of a longer key leads its LMDB key (the rest is its digest)."""
DIGEST_BYTES = LMDB_KEY_LIMIT - LONG_KEY_PREFIX


def lmdb_key(key: bytes) -> bytes:
    """The LMDB key a user key is stored under."""
    if len(key) <= LMDB_KEY_LIMIT:
        return key
    digest = hashlib.blake2b(key, digest_size=DIGEST_BYTES).digest()
    return key[:LONG_KEY_PREFIX] + digest
