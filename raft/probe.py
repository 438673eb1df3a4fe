"""Does a raft address answer as a member of this cluster? (asked before adding it)

Adding a member that is not running, or one that does not hold the cluster
secret, would make the quorum larger with a vote that never comes: three such
additions to a 3-node cluster leave it without a majority for good. So before
the leader proposes a new member it opens a connection to the address and
starts pysyncobj's handshake: it sends a random key encrypted under the
cluster secret; a member decrypts it and answers its own key paired with
ours, encrypted likewise. Only a holder of the secret can answer that, so the
answer proves both that the member runs and that it is one of us. The probe
then closes the connection (the member drops a handshake left half-way
quietly).

Without a secret (the insecure dev mode) there is no handshake to check: the
probe only checks that the address accepts a TCP connection.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import struct
import time
import zlib
from typing import Any

_MAX_ANSWER_BYTES = 4096
"""A handshake answer is ~200 bytes; a longer frame is not one."""


def _frame(encryptor: Any, message: object) -> bytes:
    data = zlib.compress(pickle.dumps(message, protocol=2), 3)
    data = encryptor.encrypt_at_time(data, int(time.monotonic()))
    return struct.pack("i", len(data)) + bytes(data)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed the connection without answering the handshake")
        data += chunk
    return data


def _answers(address: str, encryptor: Any, timeout: float) -> str | None:
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        return f"nothing answers on {address}: {exc}"
    with sock:
        if encryptor is None:
            return None
        ours = os.urandom(32)
        try:
            sock.sendall(_frame(encryptor, ours))
            (length,) = struct.unpack("i", _read_exactly(sock, 4))
            if not 0 < length <= _MAX_ANSWER_BYTES:
                return f"{address} answered something that is not a raft handshake"
            sealed = _read_exactly(sock, length)
        except (OSError, ConnectionError) as exc:
            return (
                f"{address} {exc}: it is not running rkv, or it does not hold this cluster's secret"
            )
    try:
        # Decrypted under our secret, so written by a holder of it: safe to unpickle.
        answer = pickle.loads(zlib.decompress(encryptor.decrypt(sealed)))
    except Exception:
        return f"{address} answered, but not under this cluster's secret"
    if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == ours):
        return f"{address} answered, but not to our handshake"
    return None


async def raft_answers(address: str, encryptor: Any, timeout: float = 3.0) -> str | None:
    """None when ``address`` completes the handshake under the cluster secret
    (``encryptor``: pysyncobj's, None without a secret), else what went wrong."""
    return await asyncio.get_running_loop().run_in_executor(
        None, _answers, address, encryptor, timeout
    )
