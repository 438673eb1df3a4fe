"""One rkv node: storage -> raft -> service -> HTTP, with clean start-up and shutdown.

Composition root (nothing imports it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
import signal
import sys
from typing import Any

from http_api.connections import HttpLimits
from http_api.server import HttpServer
from node import metrics as node_metrics
from node.audit.jobs import AuditExporter
from node.audit.retention import RetentionPolicy
from node.cli.common import rkv_version
from node.cli.http_workers import HttpWorkers, WorkerSettings
from node.cli.join import Discovery, Member, announce
from node.cli.node_metrics import NodeCollector, NodeParts
from node.cli.secure_start import auth_state_problem, insecure_warning
from node.cli.settings import NodeConfig
from node.cli.space_watch import space_monitor
from node.errors import ConfigError, RequestError
from node.service.audit import AuditService
from node.service.auth import AuthService
from node.service.auth_bootstrap import bootstrap_root
from node.service.auth_tokens import member_headers
from node.service.kv import KvService
from node.service.lease_clock import LeaseClock
from node.service.leases import LeaseService
from node.service.login_limits import FailedLogins
from node.state.auth_records import AUTH_META_KEY, decode_meta
from node.state.machine import StateMachine
from node.storage.compactor import Compactor
from node.storage.lmdb_store import LmdbStore
from node.storage.recovery import NodeStorage, open_storage
from raft.consensus import RaftConsensus
from replication.pull.catch_up import catch_up

logger = logging.getLogger(__name__)


async def serve(
    config: NodeConfig, stop: asyncio.Event, discovery: Discovery | None = None
) -> None:
    storage = _open_checked_storage(config)
    machine = StateMachine.over(storage)
    consensus = RaftConsensus(
        config.raft,
        storage,
        machine,
        functools.partial(
            catch_up,
            idle_timeout=config.transfer_idle_timeout,
            credentials=config.tls.peer_credentials,
            # Calls to other members carry a member token (auth, issue 16).
            headers=member_headers(config.secret, config.node_id),
        ),
    )
    exporter = audit_exporter(config, storage, machine)
    leases = lease_service(config, consensus, storage, machine)
    space = space_monitor(config, machine, consensus)
    try:
        await consensus.start()
        compactor = Compactor(
            storage.commit_log,
            storage.store,
            policy=config.compaction_policy,
            triggers=config.compaction_triggers,
            segment_bytes=config.storage.segment_bytes,
            on_apply_thread=consensus.on_apply_thread,
        )
        background = asyncio.create_task(compactor.run_triggers())
        loop = asyncio.get_running_loop()
        after_catch_up: set[asyncio.Task[object]] = set()

        def compact_after_catch_up(pulled: int) -> None:
            # A rebuilt or caught-up replica installed the leader's state (one
            # record per key): force a compaction, as the Compaction Topic's
            # rebuild flow does, so its segments are rolled and rewritten.
            def start() -> None:
                task: asyncio.Task[object] = asyncio.create_task(compactor.compact(force=True))
                after_catch_up.add(task)
                task.add_done_callback(after_catch_up.discard)

            logger.info("caught up with %d installed keys: forcing a compaction", pulled)
            loop.call_soon_threadsafe(start)

        consensus.catch_up_listeners.append(compact_after_catch_up)
        auth = auth_service(config, consensus, storage.store)
        service = KvService(
            consensus,
            storage.store,
            config.storage.max_value_bytes,
            compactor=compactor,
            log=storage.commit_log,
            watch_keepalive=config.watch_keepalive,
            producer_expiry_ms=int(config.producer_expiry_seconds * 1000),
            max_producers=config.max_producers,
            producer_sweep_slice=config.producer_sweep_slice,
            producer_count=machine.known_producer_count,
            transfer_rate_bytes=config.transfer_rate_bytes,
            max_txn_ops=config.max_txn_ops,
            max_txn_bytes=config.raft.max_entry_bytes,
            max_page_bytes=config.max_page_bytes,
            max_txn_result_bytes=config.max_txn_result_bytes,
            stall_timeout=config.transfer_idle_timeout,
            # Admin-only once auth is enabled (http_api/permissions.py).
            member_url_changes=lambda: config.security.loopback or auth.enabled,
            security=lambda: security_status(config, auth.enabled),
            max_leases=config.leases.max_leases,
            max_lease_ttl=config.leases.max_lease_ttl,
            lease_status=leases.status,
            data_paths=(config.data_dir,),
            min_free_bytes=config.diagnostics.ready_min_free_bytes,
            space_problem=lambda: space.problem,
            version=rkv_version(),
            load_limits=config.load,
        )
        sweeper = asyncio.create_task(
            sweep_producers(service, min(3600.0, max(1.0, config.producer_expiry_seconds / 4)))
        )
        audits = AuditService(
            consensus, storage.store, exporter, stall_timeout=config.transfer_idle_timeout
        )
        pruner = asyncio.create_task(prune_audit_exports(exporter))
        space_checks = asyncio.create_task(space.run(config.space.check_interval))
        lease_sweeper = asyncio.create_task(leases.sweep())
        workers = http_workers(config, service, auth, storage.store)
        http = HttpServer(
            service,
            config.http_host,
            config.http_port,
            audits,
            http_limits(config),
            tls=config.tls.server,
            auth=auth,
            leases=leases,
            metrics=config.metrics,
            collector=NodeCollector(
                NodeParts(
                    status=consensus.status,
                    storage=storage,
                    compactor=compactor,
                    producer_count=machine.known_producer_count,
                    lease_count=lambda: int(leases.status()["count"]),
                    space=space.gauges,
                )
            ),
            workers=workers,
            private_socket=None if workers is None else workers.socket_path,
            worker_key="" if workers is None else workers.key,
        )
        await start_http(http, workers)
        logger.info(
            "node %s: HTTP on %s, raft on %s%s",
            config.node_id,
            config.advertise_url,
            config.raft_address,
            "" if config.secret else " (INSECURE dev mode: no cluster secret)",
        )
        bootstrap = _secure_start(config, auth, consensus)
        joining = _announce(config, discovery)
        try:
            await stop.wait()
        finally:
            logger.info("node %s stopping", config.node_id)
            for task in (
                background,
                sweeper,
                pruner,
                lease_sweeper,
                space_checks,
                joining,
                bootstrap,
            ):
                if task is not None:
                    task.cancel()
            await stop_http(http, workers)
            service.close_held_snapshots()
    finally:
        await consensus.stop()
        # Running exports stop (and release LMDB and the log) before storage closes.
        machine.audit_hook = None
        machine.lease_hook = None
        await asyncio.to_thread(exporter.close)
        storage.close()
        logger.info("node %s stopped", config.node_id)


def audit_exporter(
    config: NodeConfig, storage: NodeStorage, machine: StateMachine
) -> AuditExporter:
    """The node's audit exports, hooked to the state machine before raft starts, so an
    audit entry applied at start-up is exported too."""
    exporter = AuditExporter(
        config.audit_path,
        config.node_id,
        storage.commit_log,
        RetentionPolicy(config.audit_keep, config.audit_keep_age_seconds),
    )
    machine.audit_hook = exporter.hook
    return exporter


def lease_service(
    config: NodeConfig, consensus: RaftConsensus, storage: NodeStorage, machine: StateMachine
) -> LeaseService:
    """Leases and locks, with a clock loaded from the state before raft applies anything,
    promoted (every deadline pushed one election timeout on) when this node wins an
    election."""
    clock = LeaseClock()
    leases = LeaseService(consensus, storage.store, clock, config.leases)
    leases.load_clock()
    leases.waits.bind(asyncio.get_running_loop())
    extension = config.raft.election_timeout_max

    def on_role(leading: bool) -> None:
        if leading:
            clock.promote(extension)
        else:
            clock.demote()

    consensus.role_listeners.append(on_role)
    # A state install replaced the leases this node knew: each due a TTL from now.
    consensus.catch_up_listeners.append(lambda pulled: leases.load_clock())
    machine.lease_hook = leases.on_applied
    return leases


async def start_http(http: HttpServer, workers: HttpWorkers | None) -> None:
    """Spawn the workers, then open the port at once (main serves until one is ready)."""
    if workers is not None:
        workers.counts = http.counts
        await workers.start()
    await http.start()


async def stop_http(http: HttpServer, workers: HttpWorkers | None) -> None:
    """The workers first (what they forward to main is answered meanwhile)."""
    if workers is not None:
        await workers.stop()
    await http.stop()


def http_limits(config: NodeConfig) -> HttpLimits:
    return HttpLimits(
        max_connections=config.max_connections,
        max_per_address=config.max_connections_per_address,
        read_timeout=config.http_read_timeout,
        idle_timeout=config.http_idle_timeout,
        max_watches=config.max_watches,
        max_watches_per_address=config.max_watches_per_address,
        max_body_bytes_in_flight=config.max_body_bytes_in_flight,
        fair_share_busy=config.fair_share_busy,
    )


def http_workers(
    config: NodeConfig,
    service: KvService,
    auth: AuthService,
    store: LmdbStore,
) -> HttpWorkers | None:
    """The HTTP worker processes of --http-workers (None for 0)."""
    if config.http_workers == 0:
        return None
    settings = WorkerSettings(
        node_id=config.node_id,
        state_dir=store.path,
        limits=http_limits(config),
        max_value_bytes=config.storage.max_value_bytes,
        max_page_bytes=config.max_page_bytes,
        max_txn_ops=config.max_txn_ops,
        max_txn_result_bytes=config.max_txn_result_bytes,
        max_txn_bytes=config.raft.max_entry_bytes,
        secret=config.secret,
        token_ttl=config.auth.token_ttl,
        awaiting_bootstrap=config.security.root_password is not None,
        tls=config.tls.server,
        metrics=config.metrics,
        log_level=config.log_level,
        log_format=config.diagnostics.log_format,
    )
    workers = HttpWorkers(config.http_workers, settings, service, auth, store)
    service.http_workers = workers.status
    return workers


def auth_service(config: NodeConfig, consensus: RaftConsensus, store: LmdbStore) -> AuthService:
    settings = config.auth
    return AuthService(
        consensus,
        store,
        config.secret,
        token_ttl=settings.token_ttl,
        max_users=settings.max_users,
        max_roles=settings.max_roles,
        max_role_permissions=settings.max_role_permissions,
        failed_logins=FailedLogins(
            settings.max_failed_logins, settings.max_failed_logins_per_address
        ),
        awaiting_bootstrap=config.security.root_password is not None,
    )


def _open_checked_storage(config: NodeConfig) -> NodeStorage:
    """Open storage, then the start-up check that needs this node's auth state
    (node/cli/secure_start.py): ConfigError, storage closed again."""
    storage = open_storage(config.data_dir, config.storage)
    found = storage.store.get(AUTH_META_KEY)
    meta = decode_meta(None if found is None else found.value)
    problem = auth_state_problem(config.security, meta.enabled, meta.revision)
    if problem is not None:
        storage.close()
        raise ConfigError(problem)
    return storage


def _secure_start(
    config: NodeConfig, auth: AuthService, consensus: RaftConsensus
) -> asyncio.Task[None] | None:
    """The loud warning of a port open beyond loopback, and the root bootstrap's task."""
    warning = insecure_warning(config.security, auth.enabled)
    if warning is not None:
        logger.warning("%s", warning)
    password = config.security.root_password
    if password is None:
        return None
    return asyncio.create_task(bootstrap_root(auth, consensus, password))


def _announce(config: NodeConfig, discovery: Discovery | None) -> asyncio.Task[None] | None:
    """With --join: add this node as a member of the cluster it discovered."""
    if config.join_url is None or discovery is None:
        return None
    return asyncio.create_task(
        announce(
            config.join_url,
            Member(config.node_id, config.raft_address, config.advertise_url),
            discovery,
            config.tls.peer_credentials,
            member_headers(config.secret, config.node_id),
        )
    )


def security_status(config: NodeConfig, auth_enabled: bool) -> dict[str, Any]:
    """/v1/status ``security``: what protects this node's HTTP port now."""
    security = config.security
    return {
        "tls": security.tls,
        "auth_enabled": auth_enabled,
        "loopback_only": security.loopback,
        "insecure_no_auth": security.insecure_no_auth,
        "warning": insecure_warning(security, auth_enabled),
    }


async def sweep_producers(service: KvService, interval: float) -> None:
    """On the leader, now and then: drop the state of producers idle past their expiry
    (a write from one is refused as unknown_producer before that anyway)."""
    while True:
        await asyncio.sleep(interval)
        try:
            expired = await service.expire_producers()
        except RequestError as exc:  # no leader, overloaded...: the next round retries
            logger.debug("producer expiry sweep skipped: %s", exc)
            continue
        if expired:
            logger.info("expired the state of %d idle producers", expired)


_FILES_BESIDE_CONNECTIONS = 1024
"""Open files a node needs besides its HTTP connections: raft peers, segments, LMDB,
snapshot and audit files, watches' log readers."""


def _raise_open_files_limit(config: NodeConfig) -> None:
    """Raise the soft open-files limit (often 1024) towards what the connection caps
    need, up to the hard limit; say so when the hard limit is too low for them."""
    wanted = config.max_connections + _FILES_BESIDE_CONNECTIONS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        soft = ceiling
    if soft != resource.RLIM_INFINITY and soft < wanted:
        logger.warning(
            "open-files limit %d is below --max-connections %d + %d: raise the hard limit "
            "(ulimit -Hn, LimitNOFILE=) or lower --max-connections",
            soft,
            config.max_connections,
            _FILES_BESIDE_CONNECTIONS,
        )


async def prune_audit_exports(exporter: AuditExporter) -> None:
    """At start-up (a deletion a crash interrupted) and now and then: delete the audit
    exports beyond the retention; the age limit needs this when no audit starts."""
    age = exporter.retention.keep_age_seconds
    interval = min(3600.0, max(1.0, age / 4)) if age else 3600.0
    while True:
        deleted = await asyncio.to_thread(exporter.prune)
        if deleted:
            logger.info("deleted %d audit exports past the retention", len(deleted))
        await asyncio.sleep(interval)


def run_node(config: NodeConfig, discovery: Discovery | None = None) -> None:
    # pysyncobj's thread and the event loop share the GIL. With the default 5 ms
    # switch interval a busy loop delays every raft step (receive, commit,
    # apply) by up to 5 ms; 0.5 ms keeps raft responsive under HTTP load.
    sys.setswitchinterval(0.0005)
    # Before anything runs: with --metrics off no counter is updated (node/metrics.py).
    node_metrics.enabled = config.metrics
    _raise_open_files_limit(config)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(config, stop, discovery)

    if config.tls.server is not None:
        # Measured (bench/http.py, rkv_secure): behind TLS, uvloop's TLS transport made
        # PUTs 30-40 % slower than the standard loop's (a response written from the
        # commit callback waits for its flush); without TLS the two are alike.
        asyncio.run(main())
        return
    try:
        import uvloop  # noqa: PLC0415 (optional dependency)
    except ImportError:  # optional: the standard loop works, only slower
        asyncio.run(main())
    else:
        uvloop.run(main())
