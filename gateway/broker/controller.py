"""BrokerController: the broker's services wired together, started and stopped as one Twisted service."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.application import service
from twisted.internet import defer, task
from twisted.internet.error import CannotListenError
from twisted.logger import Logger

from gateway.acl.admin import acl_disabled_handlers
from gateway.acl.broker_acl import BrokerAcl
from gateway.persist import corrupt_state_files
from gateway.remoting.bodies import TopicConfig
from gateway.remoting.budget import MemoryBudget
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.message import pack_host
from gateway.remoting.protocol import RemotingProtocol, RemotingServerFactory
from gateway.remoting.rpc_latency import RPC_LATENCY_BUCKETS_MS, Histograms
from gateway.remoting.sender import SendThread, start_send_thread
from gateway.store.clean_service import CleanService
from gateway.store.config import StoreConfig
from gateway.store.durability import PutWaiter, put_waiter
from gateway.store.flush import FlushService
from gateway.store.ha.client import HAClient
from gateway.store.ha.service import HAConfig, HAService
from gateway.store.message_store import DefaultMessageStore
from gateway.tls.client import client_endpoint_factory
from gateway.tls.server import TlsServer

from .clients import ConsumerManager, ProducerManager
from .config import SECRET_KEYS, BrokerConfig
from .consumer_filter import ConsumerFilterManager
from .dledger import DLedgerRoles
from .loadbalance import MessageRequestModeManager, TopicRouteInfoManager
from .longpoll import PullRequestHoldService
from .managers import ConsumerOffsetManager, SubscriptionGroupManager, TopicConfigManager
from .pop.order_info import ConsumerOrderInfoManager
from .pop.orderly import OrderlyPop
from .pop.revive import PopReviveService
from .pop.service import PopService
from .processors.ack_message import AckMessageProcessor
from .processors.admin import AdminBrokerProcessor
from .processors.admin_stats import AdminStatsProcessor
from .processors.broker_config import BrokerConfigProcessor
from .processors.broker_to_client import BrokerToClientProcessor
from .processors.change_invisible_time import ChangeInvisibleTimeProcessor
from .processors.client_manage import ClientManageProcessor
from .processors.consumer_manage import ConsumerManageProcessor
from .processors.end_transaction import EndTransactionProcessor
from .processors.lock_batch import LockBatchProcessor
from .processors.notification import NotificationProcessor, PollingInfoProcessor
from .processors.peek_message import PeekMessageProcessor
from .processors.pop_message import PopMessageProcessor
from .processors.pull import PullMessageProcessor
from .processors.query import QueryMessageProcessor
from .processors.query_assignment import QueryAssignmentProcessor
from .processors.recall import RecallMessageProcessor
from .processors.reply import ReplyMessageProcessor
from .processors.send import SendMessageProcessor
from .rebalance_lock import RebalanceLockManager
from .registration import BrokerRegistration
from .replicas import ReplicasManager
from .schedule import DELIVER_INTERVAL, ScheduleMessageService
from .send_lane import send_lane
from .slave_sync import SlaveSynchronize
from .stats import SAMPLE_SECONDS, BrokerStatsManager, MessageCounts
from .timer import TimerMessageService
from .transaction.service import TransactionalMessageService

if TYPE_CHECKING:
    from gateway.otlp import MetricsPusher

log = Logger()

_CHANNEL_SCAN_INTERVAL = 10.0
# The longest a request that created a topic waits for the NameServers to register it before it is answered.
_REGISTERED_WAIT = 1.0


class BrokerController(service.Service):
    """A broker: store, tables, client registry, processors, listener and periodic tasks."""

    def __init__(
        self,
        config: BrokerConfig,
        store_config: StoreConfig,
        reactor: Any = None,
        system_properties: Mapping[str, str] | None = None,
    ) -> None:
        """``system_properties``: the ``tls.*`` / ``rocketmq.*`` settings Java takes as -D properties
        (TLS with Java's defaults; None, e.g. in tests, serves plain connections only)."""
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.config = config
        self.store_config = store_config
        config_dir = Path(store_config.storePathRootDir) / "config"
        # DLedger mode: the commitlog is a DLedger ledger and the role follows its leadership.
        self.dledger = DLedgerRoles(self) if config.enableDLegerCommitLog else None
        if self.dledger is not None:
            self.store = DefaultMessageStore(store_config, self.dledger.commit_log())
        else:
            self.store = DefaultMessageStore(store_config)
        # Config files are written off the reactor, a burst of changes at a time.
        pool = reactor.getThreadPool()
        self.topics = TopicConfigManager(
            config, config_dir, on_change=self._topic_changed, clock=reactor, threadpool=pool
        )
        self.offsets = ConsumerOffsetManager(config_dir)
        self.groups = SubscriptionGroupManager(config, config_dir, clock=reactor, threadpool=pool)
        self.consumers = ConsumerManager(on_consumer_ids_changed=self._notify_consumer_ids_changed)
        self.producers = ProducerManager()
        self.consumer_filters = ConsumerFilterManager()
        self.rebalance_locks = RebalanceLockManager(config.rebalanceLockMaxLiveTime)
        self.request_modes = MessageRequestModeManager(config_dir)
        self.topic_route_info = TopicRouteInfoManager(self)
        self.order_info = ConsumerOrderInfoManager(
            config_dir,
            reactor,
            topic_read_queue_nums=self._read_queue_nums,
            group_exists=lambda group: group in self.groups.table,
            notify_lock_free=lambda: config.enableNotifyAfterPopOrderLockRelease,
        )
        self.schedule = ScheduleMessageService(self)
        self.timer = TimerMessageService(self)
        self.transactions = TransactionalMessageService(self)
        self.pull_processor = PullMessageProcessor(self)
        self.hold_service = PullRequestHoldService(reactor, self.pull_processor.execute_held)
        self.pop = PopService(self)
        self.revive = PopReviveService(self, self.pop)
        self.pop_processor = PopMessageProcessor(self)
        self.orderly = OrderlyPop(self)
        self.orderly.notify_arriving = self.pop_processor.polling.notify
        self.notification_processor = NotificationProcessor(self)
        self.orderly.notify_notifications = self.notification_processor.notify_message_arriving
        self.dispatcher = RequestDispatcher()
        # The latency of the gRPC calls served beside this broker (enableGrpcServer), shown on its /metrics.
        self.grpc_latency: Histograms | None = None
        self.metrics_pusher: MetricsPusher | None = None  # OTLP_GRPC, LOG
        if config.metricsExporterType.upper() in ("PROM", "OTLP_GRPC", "LOG"):
            self.dispatcher.rpc_latency = Histograms(RPC_LATENCY_BUCKETS_MS)
            self.grpc_latency = Histograms(RPC_LATENCY_BUCKETS_MS)
        send = self._send_processor = SendMessageProcessor(self)
        for processor in (
            send,
            ReplyMessageProcessor(self, send),
            EndTransactionProcessor(self),
            self.schedule,
            self.timer,
            self.pull_processor,
            ClientManageProcessor(self),
            ConsumerManageProcessor(self),
            AdminBrokerProcessor(self),
            AdminStatsProcessor(self),
            BrokerToClientProcessor(self),
            LockBatchProcessor(self),
            BrokerConfigProcessor(self),
            QueryMessageProcessor(self),
            self.pop_processor,
            AckMessageProcessor(self),
            ChangeInvisibleTimeProcessor(self),
            QueryAssignmentProcessor(self),
            PeekMessageProcessor(self),
            self.notification_processor,
            PollingInfoProcessor(self),
            RecallMessageProcessor(self),
        ):
            self.dispatcher.register_all(processor.handlers())
        self.dispatcher.on_channel_closed.append(self._channel_closed)
        # Wrap or replace before startService to serve TLS.
        self.factory = RemotingServerFactory(self.dispatcher, budget=MemoryBudget(config.remotingMaxBufferedBytes))
        self.vip_factory: RemotingServerFactory | None = None
        self.message_counts = MessageCounts()
        self.stats = BrokerStatsManager(self.message_counts, config.brokerClusterName, reactor)
        self.tls = TlsServer.from_system_properties(system_properties, reactor)
        self.acl = BrokerAcl.for_broker(config, system_properties, reactor) if config.aclEnable else None
        if self.acl is not None:
            self.acl.install(self.dispatcher)
        else:
            self.dispatcher.register_all(acl_disabled_handlers())
        self.namesrv_client = self.outer_client()
        self.registration = BrokerRegistration(self, self.namesrv_client)
        self.slave_sync = SlaveSynchronize(self)
        # Controller mode: the controller decides the role; until it has, the broker takes no writes.
        self.replicas = ReplicasManager(self) if config.enableControllerMode else None
        # Controller mode: a check before every send that waits for replicas (minInSyncReplicas).
        self.put_refused = self.replicas.put_refused if self.replicas is not None else None
        if self.replicas is not None:
            self.dispatcher.register_all(self.replicas.handlers())
            config.brokerRole = store_config.brokerRole = "SLAVE"
            self.registration.on_hold = True
        if self.dledger is not None:
            # Nothing is registered before the member has a role (Apache's brokerId is -1 until then), nor as
            # master by a leader that has not heard from a majority lately.
            self.registration.on_hold = True
            self.registration.master_lease = self.dledger.holds_lease
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.flush_service: FlushService | None = None
        self.send_thread: SendThread | None = None
        self.clean_service: CleanService | None = None
        # Set at start under SYNC_FLUSH or SYNC_MASTER: a put's end offset → its final PutMessageStatus.
        self.put_waiter: PutWaiter | None = None
        self.store_host = b""
        self.ports: list[Any] = []
        self._loops: list[task.LoopingCall] = []
        self._role_loops: list[task.LoopingCall] = []
        self._registered: defer.Deferred[Any] = defer.succeed(None)
        self.boot_timestamp = int(time.time() * 1000)
        self._tps_window = (time.monotonic(), 0, 0)
        self._tps = (0.0, 0.0)

    # -- lifecycle

    def startService(self) -> None:
        super().startService()
        report = self.store.start()
        log.info("store recovered: {report}", report=report)
        self.store.arriving_listener = self._message_arriving
        try:
            self._load_state_files()
            self.topics.persist()
            self.tls.start()
            if self.acl is not None:
                self.acl.start()
            self.send_thread = start_send_thread(self.reactor)
            self.factory.sender = self.send_thread
            configured_port = self.config.listenPort
            port = self.reactor.listenTCP(
                self.config.listenPort, self.tls.wrap(self.factory), interface=self.config.bindAddress
            )
            self.ports.append(port)
            self.config.listenPort = port.getHost().port
            self._listen_vip()
            self._listen_metrics()
            if self.dledger is None:
                self._start_ha(configured_port)
            else:
                # DLedger replicates the commitlog: no HA service; the registered HA address is BrokerStartup's.
                self.config.haListenPort = self.config.listenPort + 1
                self.dledger.start()
        except BaseException:
            self._abandon_start()
            raise
        self.store_host = pack_host(self.config.brokerIP1, self.config.listenPort)
        # The send lane serves the broker's ports (not the HA port) from their first connection on.
        lane = send_lane(self, self._send_processor)
        for factory in (self.factory, self.vip_factory):
            if factory is not None:
                factory.lane = lane.lane if lane is not None else None
        # Stopped in stopService once the connections are closed, not as soon as the reactor starts shutting down.
        self.flush_service = FlushService(self.store, self.store_config, self.reactor, stop_with_reactor=False)
        self.flush_service.start()
        self.clean_service = CleanService(self.store, self.reactor)
        self.clean_service.start()
        self.registration.drop_changes()
        if self.dledger is not None:
            self._registered = self.dledger.first_role()
        elif self.replicas is None:
            self._apply_role()
            self._registered = self.registration.register_all()
        else:
            # Controller mode: the controller says who is master; nothing is registered before that.
            self._registered = self.replicas.start()
        self._every(self.config.register_period, self.registration.register_periodically, now=False)
        self._every(self.config.flushConsumerOffsetInterval / 1000.0, self.offsets.persist_if_dirty, now=False)
        self._every(self.config.flushConsumerOffsetInterval / 1000.0, self.order_info.persist_if_dirty, now=False)
        self._every(_CHANNEL_SCAN_INTERVAL, self._scan_not_active_channels, now=False)
        self._every(1.0, self._update_tps, now=False)
        self._every(SAMPLE_SECONDS, self.stats.sample, now=True)
        self._every(60.0, self._log_slave_fall_behind, now=False)
        self._every(self.config.loadBalancePollNameServerInterval / 1000.0, self.topic_route_info.refresh, now=False)
        log.info(
            "The broker[{name}, {addr}] boot success. serializeType=JSON and name server is:{namesrv}",
            name=self.config.brokerName,
            addr=self.config.broker_addr,
            namesrv=self.config.namesrvAddr,
        )

    def _abandon_start(self) -> None:
        """Undo a start that failed before serving (a busy port, unwritable state files, unreadable TLS files): the
        store closed cleanly, so the next start needs no recovery. Nothing was registered, so nothing is
        unregistered."""
        for port in self.ports:
            port.stopListening()
        self.ports.clear()
        if self.ha_client is not None:
            self.ha_client.stop()
        if self.ha_service is not None:
            self.ha_service.stop()
        if self.dledger is not None:
            self.dledger.stop()
        if self.send_thread is not None:
            self.send_thread.stop()
        self.tls.stop()
        if self.acl is not None:
            self.acl.stop()
        # A write the tables asked for while loading would land after this start failed, over a later start's.
        self.topics.file.cancel()
        self.groups.file.cancel()
        self.store.shutdown()

    def _log_slave_fall_behind(self) -> None:
        # printMasterAndSlaveDiff, every minute while slaves are connected.
        ha = self.ha_service
        if ha is not None and ha.connections and not self.config.is_slave:
            log.info("CommitLog: slave fall behind master {diff}bytes", diff=ha.slave_fall_behind())

    def _apply_role(self) -> None:
        """Start what the configured role runs: a master's delivery loops and SYNC_MASTER waits, or a slave's
        metadata sync. Called at start, and on every role change in controller mode."""
        for loop in self._role_loops:
            if loop.running:
                loop.stop()
        self._role_loops.clear()
        cfg = self.config
        self.store_config.brokerRole = cfg.brokerRole
        # DLedger mode: a put is answered once a majority holds its entry, with no wait of its own.
        self.put_waiter = None
        if self.dledger is None:
            self.put_waiter = put_waiter(
                self.flush_service if self.store_config.flushDiskType == "SYNC_FLUSH" else None,
                self.ha_service if cfg.is_sync_master else None,
            )
        if cfg.is_slave:
            self.slave_sync.start()
            return
        self.slave_sync.stop()
        self.revive.start()
        # As Apache: only a master delivers delayed and timer messages and checks transactions back; a
        # slave has them through replication and takes delay offsets from its master.
        for seconds, fn in (
            (DELIVER_INTERVAL, self.schedule.deliver),
            (DELIVER_INTERVAL, self.timer.deliver),
            (cfg.flushDelayOffsetInterval / 1000.0, self._persist_delivery_offsets),
            (cfg.transactionCheckInterval / 1000.0, self.transactions.check),
            (cfg.reviveInterval / 1000.0, self.revive.revive),
        ):
            self._role_loops.append(self._every(seconds, fn, now=False))

    def change_role(self, role: str, broker_id: int, master_addr: str | None = None) -> defer.Deferred[Any]:
        """Controller and DLedger modes: become master (``role`` ASYNC_MASTER/SYNC_MASTER, id 0) or a slave of
        ``master_addr`` (its own id; the NameServers tell the master when None), and tell the NameServers at
        once."""
        cfg = self.config
        cfg.brokerRole, cfg.brokerId = role, broker_id
        # The NameServer keys brokers by id: an entry under an id we no longer have (a master turned slave
        # must not stay 0) goes first. Not in DLedger mode, as Apache's changeToSlave/changeToMaster: an
        # unregistration removes the id whatever address holds it, which may already be the new master's;
        # the NameServer drops our old id itself when we register under the new one from the same address.
        if self.dledger is None:
            self.registration.unregister_other_ids(broker_id)
        self.registration.master_addr = master_addr if role == "SLAVE" else None
        self.registration.on_hold = False
        self._apply_role()
        log.info(
            "broker {name} is now {role} (brokerId {id}){master}",
            name=cfg.brokerName,
            role=role,
            id=broker_id,
            master=f", following {master_addr}" if master_addr else "",
        )
        return self.registration.register_all()

    def _load_state_files(self) -> None:
        """topics.json, consumerOffset.json, subscriptionGroup.json, delayOffset.json, timerOffset.json.

        One that exists but cannot be read (nor its .bak) stops start-up with a StateFileError naming it, the
        store closed cleanly, unless ``startWithCorruptStateFiles=true`` (then it starts empty, kept aside).
        """
        with corrupt_state_files(start_empty=self.config.startWithCorruptStateFiles):
            for manager in (
                self.topics,
                self.offsets,
                self.groups,
                self.schedule,
                self.timer,
                self.pop,
                self.request_modes,
                self.order_info,
            ):
                manager.load()

    @defer.inlineCallbacks
    def when_ready(self) -> Any:
        """Fires once the first registration has been answered (or failed) by every NameServer and one has
        accepted this broker, so clients can find it; until one has, a warning says so, naming the NameServers
        tried. Controller mode: once the controller has given the role (or after registerBrokerTimeoutMills)."""
        yield self._registered
        if self.replicas is not None:
            return
        if not self.registration.accepted and self.config.namesrv_addrs:
            log.warn(
                "The broker[{name}, {addr}] is not ready: no name server has accepted its registration yet "
                "(tried {namesrv}); retrying every {period} s",
                name=self.config.brokerName,
                addr=self.config.broker_addr,
                namesrv=self.config.namesrvAddr,
                period=f"{self.config.register_period:g}",
            )
        yield self.registration.first_accepted()

    def _listen_vip(self) -> None:
        """The "VIP" channel on listenPort - 2: everything but pulls (clients with vipChannelEnabled)."""
        if self.config.listenPort <= 2:
            return
        pulls = {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE}
        self.vip_factory = RemotingServerFactory(self.dispatcher.without(pulls), budget=self.factory.budget)
        self.vip_factory.sender = self.send_thread
        try:
            self.ports.append(
                self.reactor.listenTCP(
                    self.config.listenPort - 2, self.tls.wrap(self.vip_factory), interface=self.config.bindAddress
                )
            )
        except CannotListenError as e:
            log.warn("VIP channel not available: {error}", error=e)

    def _listen_metrics(self) -> None:
        """metricsExporterType=PROM: /metrics on metricsPromExporterHost:metricsPromExporterPort; OTLP_GRPC and
        LOG: the same points pushed (gateway.otlp)."""
        cfg = self.config
        if cfg.metricsExporterType.upper() in ("OTLP_GRPC", "LOG"):
            from gateway.otlp import MetricsPusher

            from .metrics import BrokerCollector

            self.metrics_pusher = MetricsPusher(BrokerCollector(self), cfg, self.reactor, "broker-meter")
            self.metrics_pusher.start()
        if cfg.metricsExporterType.upper() != "PROM":
            return
        from gateway import prometheus  # prometheus-client and twisted.web only when asked for

        from .metrics import metrics_site

        self.ports.append(prometheus.listen(self.reactor, cfg, metrics_site(self)))

    def _start_ha(self, configured_port: int) -> None:
        """Listen for slaves on listenPort + 1 (ephemeral with an ephemeral listenPort); a slave also follows."""
        cfg = self.config
        ha = HAConfig(
            cfg.haSendHeartbeatInterval,
            cfg.haHousekeepingInterval,
            cfg.haTransferBatchSize,
            cfg.slaveTimeout,
            min(cfg.haMaxGapNotInSync, cfg.haSlaveFallbehindMax),
        )
        endpoints = client_endpoint_factory(self.tls.config)
        if self.replicas is not None:
            replicas = self.replicas
            self.ha_client = HAClient(self.store, ha, self.reactor, lambda: replicas.master_ha_addr, endpoints)
        elif cfg.is_slave:
            self.ha_client = HAClient(
                self.store,
                ha,
                self.reactor,
                lambda: cfg.haMasterAddress or self.registration.ha_master_addr or "",
                endpoints,
            )
            self.ha_client.start()
        # Every role listens, as Apache's HAService does (in controller mode a slave may become master).
        self.ha_service = HAService(self.store, ha, self.reactor)
        wanted = cfg.listenPort + 1 if configured_port else 0
        try:
            cfg.haListenPort = self.ha_service.start(wanted, cfg.bindAddress, self.tls.wrap)
        except CannotListenError as e:
            # Slaves learn the HA address from the NameServer (haServerAddr), so another port still works.
            log.warn("HA port {port} not available ({error}); using an ephemeral one", port=wanted, error=e)
            cfg.haListenPort = self.ha_service.start(0, cfg.bindAddress, self.tls.wrap)

    def _every(self, seconds: float, fn: Any, now: bool = True) -> task.LoopingCall:
        loop = task.LoopingCall(fn)
        loop.clock = self.reactor
        loop.start(seconds, now=now).addErrback(lambda f: log.failure("periodic task failed", f))
        self._loops.append(loop)
        return loop

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        super().stopService()
        self.tls.stop()
        if self.acl is not None:
            self.acl.stop()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        if self.metrics_pusher is not None:
            yield self.metrics_pusher.stop()
        if self.replicas is not None:
            yield self.replicas.stop()
        if self.dledger is not None:
            yield self.dledger.stop()
        yield self.slave_sync.stop()
        if self.ha_client is not None:
            self.ha_client.stop()
        if self.ha_service is not None:
            yield self.ha_service.stop()
        self.registration.drop_changes()
        yield self.registration.unregister_all()
        yield self.namesrv_client.close()
        for port in self.ports:
            yield port.stopListening()
        self.ports.clear()
        yield self.factory.close_all()
        if self.vip_factory is not None:
            yield self.vip_factory.close_all()
        if self.send_thread is not None:
            self.send_thread.stop()
        self.hold_service.shutdown()
        self.pop_processor.polling.shutdown()
        self.notification_processor.polling.shutdown()
        if self.clean_service is not None:
            yield self.clean_service.stop()
        if self.flush_service is not None:
            yield self.flush_service.stop()
        yield defer.gatherResults([self.topics.file.flush(), self.groups.file.flush()])
        self.offsets.persist()
        self.order_info.shutdown()
        self.order_info.persist()
        self._persist_delivery_offsets()
        self.store.shutdown()
        log.info("broker {name} stopped", name=self.config.brokerName, console=True)

    def _persist_delivery_offsets(self) -> None:
        self.schedule.persist()
        self.timer.persist()

    # -- helpers used by processors

    def born_host(self, channel: RemotingProtocol) -> bytes:
        """The client's address as records store it (cached per connection)."""
        host = channel.attributes.get("born_host")
        if host is None:
            host = channel.attributes["born_host"] = pack_host(channel.peer_host or "127.0.0.1", channel.peer_port)
        return host

    @property
    def put_total(self) -> int:
        """Messages stored since start."""
        return self.message_counts.total_in

    @property
    def get_total(self) -> int:
        """Messages pulled since start."""
        return self.message_counts.total_out

    def _update_tps(self) -> None:
        now = time.monotonic()
        t0, put0, get0 = self._tps_window
        dt = max(now - t0, 1e-6)
        put, got = self.put_total, self.get_total
        self._tps = ((put - put0) / dt, (got - get0) / dt)
        self._tps_window = (now, put, got)

    def consume_progress(self, group: str, topic: str, queue_id: int) -> tuple[int, int, int]:
        """(broker offset, committed offset, store time of the last message consumed or 0) of one queue, as
        consumerProgress shows it; offsets never below 0."""
        store = self.store
        broker_offset = max(store.get_max_offset_in_queue(topic, queue_id), 0)
        consumed = max(self.offsets.query_offset(group, topic, queue_id), 0)
        last = max(store.get_message_store_timestamp(topic, queue_id, consumed - 1), 0) if consumed > 0 else 0
        return broker_offset, consumed, last

    def inflight(self, group: str, topic: str, queue_id: int) -> tuple[int, int]:
        """Messages of one queue in flight: (pulled and not committed, popped and neither acked nor revived)."""
        pulled_to = self.message_counts.pulled_to.get((topic, group, queue_id), 0)
        pulled = max(pulled_to - max(self.offsets.query_offset(group, topic, queue_id), 0), 0)
        return pulled, self.pop.inflight.get(topic, group, queue_id)

    def _read_queue_nums(self, topic: str) -> int | None:
        tc = self.topics.select(topic)
        return tc.read_queue_nums if tc is not None else None

    def subscribes(self, group: str, topic: str) -> bool:
        """False when ``group`` is online with subscriptions that leave ``topic`` out (Java's
        findSubscriptionDataCount > 0 and no findSubscriptionData): its offsets there are stale."""
        cg = self.consumers.get(group)
        return cg is None or not cg.subscription_table or cg.find_subscription(topic) is not None

    def dispatch_behind(self) -> int:
        """Commitlog bytes not yet in the consume queues: a master dispatches as it appends; a slave may hold
        the first part of a record still being replicated; a DLedger member dispatches what is committed."""
        if self.dledger is None and not self.config.is_slave:
            return 0
        return max(self.store.commit_log.max_offset - self.store.replicated_whole_records_end, 0)

    def put_tps(self) -> float:
        return self._tps[0]

    def get_tps(self) -> float:
        return self._tps[1]

    def earliest_message_time(self) -> int:
        data = self.store.look_message_by_offset(self.store.get_min_phy_offset())
        if not data or len(data) < 64:
            return 0
        return int.from_bytes(data[56:64], "big", signed=True)

    def disk_ratio(self) -> float:
        root = self.store_config.storePathRootDir
        os.makedirs(root, exist_ok=True)
        usage = shutil.disk_usage(root)
        return usage.used / usage.total if usage.total else 0.0

    def all_config(self) -> dict[str, Any]:
        """Every setting but the secrets (SECRET_KEYS)."""
        config = {k: v for k, v in asdict(self.config).items() if k not in SECRET_KEYS}
        return {**asdict(self.store_config), **config}

    def outer_client(self) -> RemotingClient:
        """A client for this broker's own requests to NameServers, controllers and its master: TLS as
        ``tls.*`` says, signed with ``innerClientAuthenticationCredentials`` when set."""
        client = RemotingClient(self.reactor, endpoint_factory=client_endpoint_factory(self.tls.config))
        credentials = self.config.inner_credentials
        if credentials is not None:
            client.request_hooks.append(lambda _addr, request: credentials.sign(request))
        return client

    # -- events

    def _message_arriving(self, topic: str, queue_id: int, logic_offset: int, tags_code: int) -> None:
        self.hold_service.notify_message_arriving(topic, queue_id, logic_offset + 1, tags_code)
        pop_polling = self.pop_processor.polling
        if pop_polling.topic_groups:  # nobody pops and waits (every 4.x send)
            pop_polling.notify_message_arriving(topic, queue_id, tags_code)
        notification_polling = self.notification_processor.polling
        if notification_polling.topic_groups:
            notification_polling.notify_message_arriving(topic, queue_id, tags_code)
        if self.ha_service is not None:
            self.ha_service.wakeup()

    def answer_once_registered(self, topics_version: int, response: Any) -> Any:
        """``response``, or once the NameServers know the topics created since ``topics_version`` (the topic
        table's data version counter when the request arrived). Apache registers a topic it creates (through
        TBW102, retry and DLQ topics) before answering the request that created it, so the client finds the
        route at once; requests of one reactor turn share one registration. A NameServer that does not answer
        delays the answer by ``_REGISTERED_WAIT`` at most (Apache sends that registration oneway)."""
        if self.topics.data_version.counter == topics_version or not self.running:
            return response
        answered: defer.Deferred[None] = defer.Deferred()

        def answer(_: Any = None) -> None:
            if not answered.called:
                answered.callback(None)

        timer = self.reactor.callLater(_REGISTERED_WAIT, answer)
        registered = self.registration.topics_registered()
        registered.addErrback(lambda f: log.failure("registering new topics failed", f))
        registered.addCallback(lambda _: timer.cancel() if timer.active() else None).addCallback(answer)
        return answered.addCallback(lambda _: response)

    def _topic_changed(self, tc: TopicConfig) -> None:
        if self.running:
            self.registration.topics_changed(tc.topic_name)

    def _notify_consumer_ids_changed(self, group: str, channels: list[RemotingProtocol]) -> None:
        for ch in channels:
            req = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True, language="JAVA"
            )
            ch.invoke_oneway(req)

    def _notify_group(self, group: str) -> bool:
        cfg = self.groups.table.get(group)
        return self.config.notifyConsumerIdsChangedEnable and (cfg is None or cfg.notify_consumer_ids_changed_enable)

    def _channel_closed(self, channel: RemotingProtocol) -> None:
        self.consumers.channel_closed(channel, self._notify_group)
        self.producers.channel_closed(channel)
        self.hold_service.channel_closed(channel)
        self.pop_processor.polling.channel_closed(channel)
        self.notification_processor.polling.channel_closed(channel)

    def _scan_not_active_channels(self) -> None:
        expire = self.config.channelNotActiveInterval
        for ch in self.consumers.scan_not_active(expire, self._notify_group) + self.producers.scan_not_active(expire):
            ch.close()
