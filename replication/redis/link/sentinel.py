"""Finding the master through Redis Sentinel, and following it when it moves.

``redis-sentinel://[user:password@]host:port[,host:port...]/MASTER_NAME``
names the sentinels (port 26379 by default) and the name they monitor the
master under; the login in the URL (or given apart) is the sentinels'. The
master's own password is the one given for the master (:class:`SentinelSource`).

:meth:`SentinelMaster.locate` asks the sentinels in turn, starting with the
last one that answered, ``SENTINEL get-master-addr-by-name NAME``, connects to
the address named and checks with ``ROLE`` that it really is a master: a
demoted master may still be named for a moment after a failover, and a
killed one until the sentinels agree it is down. Errors are
:class:`RedisLinkError`, retryable when asking again later may help (no
sentinel reachable, the master named unreachable or not a master yet), not
when nothing can work (a login refused, no sentinel knowing the name at
start, something that is not a sentinel).

:meth:`SentinelMaster.watch` runs a daemon thread subscribed to
``+switch-master`` on one sentinel (on the next one when that one fails or
stops answering PING) and calls ``on_switch`` with the new master's address
when the master named moves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from .resp_client import ReplyError, RespConnection
from .types import MasterAddress, RedisLinkError

log = logging.getLogger(__name__)

SCHEME = "redis-sentinel"
DEFAULT_SENTINEL_PORT = 26379
TIMEOUT = 5.0
"""Seconds for connecting to a sentinel or the master named, and for each reply."""
WATCH_PING_INTERVAL = 2.0
"""Seconds of silence after which the subscribed sentinel is PINGed (and
dropped for the next one if it stays silent as long again)."""
WATCH_RETRY_PAUSE = 1.0
"""Pause after every sentinel failed to take the subscription, before trying again."""
_RETRYABLE = frozenset({"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN"})

SwitchCallback = Callable[[MasterAddress, str], None]
"""``on_switch(new_master, who_said_so)``."""


@dataclass(frozen=True)
class SentinelSource:
    """The sentinels, the master's name, and the two logins."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    """The sentinels' password (Sentinel's ``requirepass`` or an ACL user's)."""
    master_password: str | None = field(default=None, repr=False)
    """The master's password (the ``default`` user's)."""

    @classmethod
    def parse(
        cls, url: str, password: str | None = None, master_password: str | None = None
    ) -> SentinelSource:
        """Parse the URL (see the module docstring); ``password``: the sentinels'
        password given apart (the URL then holds none). Raises ValueError naming
        the problem, never showing a password."""
        parts = urlsplit(url)
        netloc = parts.netloc
        login, at, hosts = netloc.rpartition("@")
        bad = f"bad Redis Sentinel URL {_redact(url)!r}"
        if parts.scheme != SCHEME:
            raise ValueError(f"{bad}: expected {SCHEME}://[user:password@]host:port[,...]/NAME")
        if parts.query or parts.fragment:
            raise ValueError(f"{bad}: nothing may follow the master's name")
        name = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        if not name or "/" in name or any(c.isspace() for c in name):
            raise ValueError(f"{bad}: no master name (…/NAME, as in `sentinel monitor NAME`)")
        sentinels = tuple(_host_port(item, bad) for item in hosts.split(","))
        username = url_password = None
        if at:
            user, colon, secret = login.partition(":")
            username = unquote(user) or None
            url_password = unquote(secret) if colon else None
        if url_password is not None:
            if password is not None:
                raise ValueError(
                    f"{bad}: the URL holds a password and one is given apart; give it once"
                )
            password = url_password
        if username is not None and password is None:
            raise ValueError(f"{bad}: a user needs a password (user:password@, or given apart)")
        return cls(sentinels, name, username, password, master_password)

    def __str__(self) -> str:
        login = f"{self.username or ''}:***@" if self.password is not None else ""
        hosts = ",".join(_format(host, port) for host, port in self.sentinels)
        return f"{SCHEME}://{login}{hosts}/{self.master_name}"


def _host_port(item: str, bad: str) -> tuple[str, int]:
    try:
        parts = urlsplit(f"//{item}")
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{bad}: {exc}") from None
    if not parts.hostname or parts.username is not None or parts.path:
        raise ValueError(f"{bad}: {item!r} is not host:port")
    return parts.hostname, DEFAULT_SENTINEL_PORT if port is None else port


def _format(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _redact(url: str) -> str:
    head, at, tail = url.rpartition("@")
    if not at or ":" not in head.partition("//")[2]:
        return url
    return head[: head.rindex(":") + 1] + "***@" + tail


class SentinelMaster:
    """Where the master of a :class:`SentinelSource` is (see the module docstring)."""

    def __init__(self, source: SentinelSource, timeout: float = TIMEOUT) -> None:
        self.source = source
        self._timeout = timeout
        self._first = 0  # the sentinel to ask first: the last one that answered
        self._found_once = False
        self._closed = threading.Event()
        self._watching: RespConnection | None = None
        self._thread: threading.Thread | None = None

    def __str__(self) -> str:
        return str(self.source)

    # -- locate ---------------------------------------------------------------------

    def locate(self) -> MasterAddress:
        """The master's address, checked with ROLE (raises RedisLinkError)."""
        sentinels = self.source.sentinels
        unreachable: list[str] = []
        unknown: list[str] = []
        for step in range(len(sentinels)):
            index = (self._first + step) % len(sentinels)
            host, port = sentinels[index]
            where = _format(host, port)
            try:
                with self._open_sentinel(host, port) as conn:
                    reply = conn.call(
                        "SENTINEL", "get-master-addr-by-name", self.source.master_name
                    )
            except (OSError, ConnectionError) as exc:
                unreachable.append(f"{where}: {exc}")
                continue
            except ReplyError as exc:
                raise self._refused(where, "SENTINEL get-master-addr-by-name", exc) from None
            if reply is None:
                unknown.append(where)
                continue
            self._first = index
            address = self._master_at(reply, where)
            self._check_role(address, where)
            self._found_once = True
            return address
        name = self.source.master_name
        if unknown and not unreachable and not self._found_once:
            raise RedisLinkError(
                f"no sentinel knows a master named {name!r} (asked {', '.join(unknown)}): "
                "check the name in the URL against `sentinel monitor` in their configuration",
                retryable=False,
            )
        if unknown:
            unreachable.append(f"{', '.join(unknown)}: no master named {name!r}")
        raise RedisLinkError(
            f"no sentinel named the master {name!r}: {'; '.join(unreachable)}", retryable=True
        )

    def _master_at(self, reply: object, where: str) -> MasterAddress:
        try:
            assert isinstance(reply, list) and len(reply) == 2
            host, port = bytes(reply[0]).decode(), int(reply[1])
        except (AssertionError, TypeError, ValueError):
            raise RedisLinkError(
                f"sentinel {where}: unexpected reply {reply!r:.200}", retryable=True
            ) from None
        return MasterAddress(host, port, None, self.source.master_password)

    def _check_role(self, address: MasterAddress, where: str) -> None:
        named = f"sentinel {where} names {address.host}:{address.port} as the master"
        try:
            with RespConnection(address.host, address.port, self._timeout) as conn:
                if address.password is not None:
                    conn.call("AUTH", address.password)
                role = conn.call("ROLE")
        except (OSError, ConnectionError) as exc:
            raise RedisLinkError(
                f"{named}, which cannot be reached: {exc}", retryable=True
            ) from None
        except ReplyError as exc:
            if exc.code in ("NOAUTH", "WRONGPASS") or "password" in str(exc):
                raise RedisLinkError(
                    f"{named}, which refused the login: {exc} (the master's password: "
                    "--source-password-file or $RKV_REDIS_PASSWORD)",
                    retryable=False,
                ) from None
            raise RedisLinkError(f"{named}, which refused ROLE: {exc}", retryable=True) from None
        if not (isinstance(role, list) and role and role[0] == b"master"):
            said = bytes(role[0]).decode() if isinstance(role, list) and role else repr(role)
            raise RedisLinkError(
                f"{named}, but it says it is a {said} (a failover under way?): asking again",
                retryable=True,
            )

    def _open_sentinel(self, host: str, port: int) -> RespConnection:
        conn = RespConnection(host, port, self._timeout)
        try:
            if self.source.password is not None:
                login = [self.source.username] if self.source.username else []
                conn.call("AUTH", *login, self.source.password)
        except ReplyError as exc:
            conn.close()
            raise self._refused(_format(host, port), "the login", exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _refused(self, where: str, what: str, exc: ReplyError) -> RedisLinkError:
        text = str(exc)
        if exc.code in ("NOAUTH", "WRONGPASS") or "password" in text:
            hint = (
                "give the sentinels' password (--sentinel-password-file or "
                "$RKV_REDIS_SENTINEL_PASSWORD)"
                if exc.code == "NOAUTH"
                else "check the sentinels' user and password"
            )
            return RedisLinkError(
                f"sentinel {where} refused {what}: {text}: {hint}", retryable=False
            )
        if exc.code == "NOPERM":
            return RedisLinkError(f"sentinel {where}: {what} not allowed: {text}", retryable=False)
        return RedisLinkError(
            f"sentinel {where} refused {what}: {text}", retryable=exc.code in _RETRYABLE
        )

    # -- watch ----------------------------------------------------------------------

    def watch(self, on_switch: SwitchCallback) -> None:
        """Follow ``+switch-master`` in a daemon thread until :meth:`close`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._watch, args=(on_switch,), name="redis-sentinel-watch", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        conn = self._watching
        if conn is not None:
            conn.shutdown()

    def _watch(self, on_switch: SwitchCallback) -> None:
        sentinels = self.source.sentinels
        index = self._first
        failed_in_a_row = 0
        while not self._closed.is_set():
            host, port = sentinels[index % len(sentinels)]
            where = _format(host, port)
            try:
                self._follow(host, port, on_switch)
            except (OSError, ConnectionError, ReplyError, RedisLinkError) as exc:
                if self._closed.is_set():
                    return
                log.warning("sentinel %s: %s; listening for +switch-master on the next", where, exc)
            index += 1
            failed_in_a_row += 1
            if failed_in_a_row >= len(sentinels):
                failed_in_a_row = 0
                self._closed.wait(WATCH_RETRY_PAUSE)

    def _follow(self, host: str, port: int, on_switch: SwitchCallback) -> None:
        where = _format(host, port)
        with self._open_sentinel(host, port) as conn:
            self._watching = conn
            try:
                conn.call("SUBSCRIBE", "+switch-master")
                log.info("listening for +switch-master on sentinel %s", where)
                pinged = False
                while not self._closed.is_set():
                    try:
                        message = conn.read(WATCH_PING_INTERVAL)
                    except TimeoutError:
                        if pinged:
                            raise ConnectionError("no answer to PING") from None
                        conn.send("PING")
                        pinged = True
                        continue
                    pinged = False
                    moved = self._switched_to(message)
                    if moved is not None:
                        on_switch(moved, f"sentinel {where}")
            finally:
                self._watching = None

    def _switched_to(self, message: object) -> MasterAddress | None:
        """The new address in a ``+switch-master`` message about our master."""
        if not (isinstance(message, list) and len(message) == 3 and message[0] == b"message"):
            return None
        words = bytes(message[2]).decode(errors="replace").split()
        if len(words) != 5 or words[0] != self.source.master_name or not words[4].isdigit():
            return None
        return MasterAddress(words[3], int(words[4]), None, self.source.master_password)
