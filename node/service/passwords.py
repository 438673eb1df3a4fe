"""Password hashes: scrypt (hashlib.scrypt), salted, memory-hard.

Parameters: N = 2**15, r = 8, p = 3, 16 random bytes of salt, 32 bytes out.
scrypt's memory is 128 * r * N bytes = 32 MiB per hash, and its time about a
quarter of a second on one core here; both are the point: a guess costs an
attacker the same, and memory-hardness makes GPUs and ASICs no cheaper per
guess. These are OWASP's recommended equivalent of N = 2**17, r = 8, p = 1
(128 MiB): the same work with a quarter of the memory, so that a node
verifying a few logins at once stays within tens of MiB (the service runs at
most :data:`MAX_CONCURRENT_HASHES` at a time, off the event loop).

A hash is stored as text that names its parameters,
``scrypt$N$r$p$<salt b64>$<hash b64>``, so they can be raised later without
invalidating existing passwords. Hashing happens on the node that receives the
request, before anything is proposed: a password never enters the raft log,
a log line or an answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 3
SALT_BYTES = 16
HASH_BYTES = 32
MAX_CONCURRENT_HASHES = 2
"""scrypt runs at most this many at once per node (each takes 32 MiB)."""
MAX_PASSWORD_CHARS = 256
"""The longest password, in characters (at most 1 KiB of UTF-8)."""
_MAXMEM = 2 * 128 * SCRYPT_R * SCRYPT_N  # room above the 32 MiB scrypt needs


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password, salt=salt, n=n, r=r, p=p, maxmem=max(_MAXMEM, 2 * 128 * r * n), dklen=HASH_BYTES
    )


def hash_password(password: str) -> str:
    """The stored form of ``password`` (blocking: a quarter of a second of CPU)."""
    salt = os.urandom(SALT_BYTES)
    digest = _scrypt(password.encode(), salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    encoded = [base64.b64encode(part).decode() for part in (salt, digest)]
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${encoded[0]}${encoded[1]}"


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the stored hash (blocking, constant-time compare).
    A hash this node cannot read matches nothing."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt" or int(n) > 2**20 or int(r) > 32 or int(p) > 16:
            return False
        expected = base64.b64decode(digest)
        actual = _scrypt(password.encode(), base64.b64decode(salt), int(n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)
