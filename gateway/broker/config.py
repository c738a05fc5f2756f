"""Broker settings under RocketMQ's own broker.conf keys (BrokerConfig, NettyServerConfig, MessageStoreConfig)."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from gateway.acl.signer import SessionCredentials
from gateway.config import SYSTEM_PROPERTY_PREFIXES, ConfigError, apply_properties, load_properties
from gateway.dledger.config import DLedgerConfig, DLedgerConfigError, parse_peers
from gateway.dledger.store import DLedgerStoreConfig
from gateway.otlp import MetricsPushKeys, push_config_problem
from gateway.remoting.budget import DEFAULT_MAX_BUFFERED_BYTES
from gateway.remoting.names import topic_problem
from gateway.store.config import StoreConfig

# DLedgerConfig's timings and limits that broker.conf may set, under DLedgerConfig's Java names (camelCase of
# our snake_case fields); Apache's broker leaves them at dledger 0.3.1.2's defaults, which are ours too.
DLEDGER_KEYS = (
    "heartBeatTimeIntervalMs",
    "maxHeartBeatLeak",
    "minVoteIntervalMs",
    "maxVoteIntervalMs",
    "maxPendingRequestsNum",
    "maxWaitAckTimeMs",
    "maxPushTimeOutMs",
    "peerPushThrottlePoint",
    "peerPushQuota",
    "flushFileInterval",
    "checkPointInterval",
    "enablePushToFollower",
    "maxLeadershipTransferWaitIndex",
    "minTakeLeadershipVoteIntervalMs",
    "maxTakeLeadershipVoteIntervalMs",
    "leadershipTransferWaitTimeout",
    "maxBatchPushSize",
)


def _snake(key: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", key).lower()


# MessageStoreConfig.MULTI_PATH_SPLITTER (DLedgerCommitLog hands it to DLedger): it separates several data paths.
MULTI_PATH_SPLITTER = ","
_DLEDGER_DEFAULTS = {f.name: f.default for f in fields(DLedgerConfig) if f.default is not MISSING}


def _dledger_default(key: str) -> Any:
    return _DLEDGER_DEFAULTS[_snake(key)]


def _local_ip() -> str:
    # RocketMQ picks a non-loopback address; we default to loopback unless brokerIP1 says otherwise,
    # because offset message ids must carry an address clients can reach.
    return os.environ.get("ROCKETMQ_BROKER_IP", "127.0.0.1")


@dataclass
class BrokerConfig(MetricsPushKeys):
    """BrokerConfig + the NettyServerConfig keys we use; attribute names are broker.conf keys."""

    brokerClusterName: str = "DefaultCluster"
    brokerName: str = socket.gethostname().split(".")[0] or "broker-a"
    brokerId: int = 0
    brokerIP1: str = ""
    brokerIP2: str = ""
    listenPort: int = 10911
    bindAddress: str = "0.0.0.0"
    haListenPort: int = 10912
    namesrvAddr: str = ""
    rocketmqHome: str = ""
    # PLAIN ACL: plain_acl.yml under rocketmqHome (gateway.acl).
    aclEnable: bool = False
    # The RocketMQ 5 gRPC endpoint in this process (gateway.proxy), on Apache's proxy port by default.
    enableGrpcServer: bool = False
    grpcServerPort: int = 8081
    grpcMaxConnections: int = 4096  # see gateway.proxy.config
    # RocketMQ 5's pull exporter: PROM serves /metrics (gateway.broker.metrics); DISABLE (default) serves nothing.
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = ""  # default: bindAddress
    metricsPromExporterPort: int = 5557
    # The cluster console's address (http(s)://host:port/): the per-broker console links to it.
    clusterConsoleUrl: str = ""
    # {"accessKey": ..., "secretKey": ...}: this broker signs its own requests (a slave's metadata sync, the
    # controller and NameServer links) as AclClientRPCHook does, RocketMQ 5's AuthConfig key. Unset, it does
    # not sign, as 4.9.8: the master must then whitelist its slaves' addresses.
    innerClientAuthenticationCredentials: str = ""
    brokerRole: str = "ASYNC_MASTER"
    brokerPermission: int = 6
    autoCreateTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    defaultTopicQueueNums: int = 8
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    traceTopicEnable: bool = False
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    regionId: str = "DefaultRegion"
    traceOn: bool = True
    registerNameServerPeriod: int = 30000
    # Ours: the shortest registerNameServerPeriod taken (Apache's fixed 10 s), at least 1 s; lowered in tests.
    registerNameServerPeriodMin: int = 10000
    forceRegister: bool = True
    registerBrokerTimeoutMills: int = 6000
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    flushConsumerOffsetInterval: int = 5000
    channelNotActiveInterval: int = 120000
    notifyConsumerIdsChangedEnable: bool = True
    rejectTransactionMessage: bool = False
    transactionTimeOut: int = 6000  # a half message younger than this is not checked back yet
    transactionCheckMax: int = 15  # check-backs before a half message goes to TRANS_CHECK_MAX_TIME_TOPIC
    transactionCheckInterval: int = 60000
    storeReplyMessageEnable: bool = True
    # MessageStoreConfig keys in Java; the schedule and timer services that read them live in the broker here.
    flushDelayOffsetInterval: int = 10000
    timerWheelEnable: bool = True
    timerMaxDelaySec: int = 3 * 24 * 3600
    # 5.3: RECALL_MESSAGE of delayed messages (off by default, as in Apache).
    recallMessageEnable: bool = False
    allowRecallWhenBrokerNotWriteable: bool = True
    enablePropertyFilter: bool = False
    # Java's system property rocketmq.broker.rebalance.lockMaxLiveTime (ms), as a broker.conf key here.
    rebalanceLockMaxLiveTime: int = 60000
    # 5.x POP consumption (gateway.broker.pop): checkpoints and acks in reviveQueueNum queues of
    # rmq_sys_REVIVE_LOG_<cluster>, read every reviveInterval ms (up to reviveMaxSlow times slower while
    # idle); a pop reads the pop retry topic first popFromRetryProbability times in 100; pops that find
    # nothing wait, at most popPollingSize per queue and group, popPollingMapSize such keys, maxPopPollingSize
    # in all.
    reviveQueueNum: int = 8
    reviveInterval: int = 1000
    reviveMaxSlow: int = 3
    popFromRetryProbability: int = 20
    # A group without an offset that pops from the queue's end (ConsumeInitMode.MAX) still starts at its first
    # message while the queue starts at 0 and that message is within the in-memory share of the commitlog.
    initPopOffsetByCheckMsgInMem: bool = True
    popPollingSize: int = 1024
    popPollingMapSize: int = 100000
    maxPopPollingSize: int = 100000
    slaveReadEnable: bool = False
    # 5.x: load balancing done by the broker (QUERY_ASSIGNMENT) for lite pull and POP consumers; a group's
    # mode (PULL or POP) per topic unless SET_MESSAGE_REQUEST_MODE set one, and how many following members'
    # queues a POP member shares (-1: every queue). Topic queues come from the NameServers, refreshed this often.
    serverLoadBalancerEnable: bool = True
    defaultMessageRequestMode: str = "PULL"
    defaultPopShareQueueNum: int = -1
    loadBalancePollNameServerInterval: int = 30000
    # Orderly POP: wake held pops of a queue when its order lock frees (its batch acked or invisible again).
    enableNotifyAfterPopOrderLockRelease: bool = True
    offsetCheckInSlave: bool = False
    fetchNamesrvAddrByAddressServer: bool = False
    startAcceptSendRequestTimeStamp: int = 0
    # Java's thread pool queues; here only reported (brokerStatus): one reactor thread queues nothing.
    sendThreadPoolQueueCapacity: int = 10000
    pullThreadPoolQueueCapacity: int = 100000
    queryThreadPoolQueueCapacity: int = 20000
    endTransactionPoolQueueCapacity: int = 100000
    # Ours (Apache has no limit): the most read or write queues a topic or a group's retry topic may have,
    # so one admin request cannot make every later request on that topic walk millions of queues.
    maxTopicQueueNums: int = 1024
    # Where UPDATE_BROKER_CONFIG persists (Java's brokerConfigPath): the -c file unless set; none without one.
    brokerConfigPath: str = ""
    # Keys UPDATE_BROKER_CONFIG refuses, ';'-separated (Java's default; paths and programs are always refused).
    configBlackList: str = "configBlackList;brokerConfigPath"
    # Ours: start with an empty table (the broken files kept aside) when a state file such as
    # consumerOffset.json and its .bak are both unreadable, instead of refusing to start.
    startWithCorruptStateFiles: bool = False
    # Ours: the most bytes all client connections together may hold in incomplete frames and unsent replies
    # (512 MiB); past it the newest such connections are closed. Always on (must be positive); read at start.
    remotingMaxBufferedBytes: int = DEFAULT_MAX_BUFFERED_BYTES
    # 4.x HA (MessageStoreConfig keys in Java). haListenPort is forced to listenPort + 1 as BrokerStartup does
    # (an ephemeral port when listenPort is 0). A slave follows haMasterAddress (host:haPort) when set.
    haMasterAddress: str = ""
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20000
    haTransferBatchSize: int = 32 * 1024
    # SYNC_MASTER: a send waits up to slaveTimeout ms for a slave (FLUSH_SLAVE_TIMEOUT after), and none is
    # waited for (SLAVE_NOT_AVAILABLE) when no slave is connected within the gap: haMaxGapNotInSync (5.x)
    # or haSlaveFallbehindMax (its 4.x name), whichever is smaller, 256 MiB by default.
    # 5.x controller mode (gateway.broker.replicas): the controller elects the master of the group; brokerRole
    # then only says whether a master waits for its SyncStateSet (SYNC_MASTER) or not.
    enableControllerMode: bool = False
    controllerAddr: str = ""  # ';'-separated controller remoting addresses
    brokerHeartbeatInterval: int = 1000
    controllerHeartBeatTimeoutMills: int = 10000
    checkSyncStateSetPeriod: int = 5000
    syncControllerMetadataPeriod: int = 10000
    brokerElectionPriority: int = 2**31 - 1
    haMaxTimeSlaveNotCatchup: int = 15000
    # A controller-mode SYNC_MASTER acknowledges a send once inSyncReplicas replicas (itself included) hold it,
    # or every member of the SyncStateSet with allAckInSyncStateSet; with fewer than minInSyncReplicas members
    # in the SyncStateSet it refuses sends ("in-sync replicas not enough"), as RocketMQ 5.
    inSyncReplicas: int = 1
    minInSyncReplicas: int = 1
    allAckInSyncStateSet: bool = False
    slaveTimeout: int = 3000
    haMaxGapNotInSync: int = 256 * 1024 * 1024
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    # DLedger mode (MessageStoreConfig keys in Java): the commitlog is a ledger the members of dLegerPeers
    # ("n0-host:port;n1-host:port;...") replicate as the group dLegerGroup, this broker being dLegerSelfId; its
    # role and brokerId follow the leadership (gateway.broker.dledger), the 4.x HA replication is off.
    # preferredLeaderId lists the members that should lead (';'-separated), enableBatchPush pushes entries to
    # followers in batches. The rest are DLedgerConfig's own (DLEDGER_KEYS), in milliseconds where timed.
    enableDLegerCommitLog: bool = False
    dLegerGroup: str = ""
    dLegerPeers: str = ""
    dLegerSelfId: str = ""
    preferredLeaderId: str = ""
    enableBatchPush: bool = False
    heartBeatTimeIntervalMs: int = _dledger_default("heartBeatTimeIntervalMs")
    maxHeartBeatLeak: int = _dledger_default("maxHeartBeatLeak")
    minVoteIntervalMs: int = _dledger_default("minVoteIntervalMs")
    maxVoteIntervalMs: int = _dledger_default("maxVoteIntervalMs")
    maxPendingRequestsNum: int = _dledger_default("maxPendingRequestsNum")
    maxWaitAckTimeMs: int = _dledger_default("maxWaitAckTimeMs")
    maxPushTimeOutMs: int = _dledger_default("maxPushTimeOutMs")
    peerPushThrottlePoint: int = _dledger_default("peerPushThrottlePoint")
    peerPushQuota: int = _dledger_default("peerPushQuota")
    flushFileInterval: int = _dledger_default("flushFileInterval")
    checkPointInterval: int = _dledger_default("checkPointInterval")
    enablePushToFollower: bool = _dledger_default("enablePushToFollower")
    maxLeadershipTransferWaitIndex: int = _dledger_default("maxLeadershipTransferWaitIndex")
    minTakeLeadershipVoteIntervalMs: int = _dledger_default("minTakeLeadershipVoteIntervalMs")
    maxTakeLeadershipVoteIntervalMs: int = _dledger_default("maxTakeLeadershipVoteIntervalMs")
    leadershipTransferWaitTimeout: int = _dledger_default("leadershipTransferWaitTimeout")
    maxBatchPushSize: int = _dledger_default("maxBatchPushSize")

    def __post_init__(self) -> None:
        if not self.brokerIP1:
            self.brokerIP1 = _local_ip()
        if not self.brokerIP2:
            self.brokerIP2 = self.brokerIP1

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:listenPort``: the address registered and encoded in message ids."""
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def inner_credentials(self) -> SessionCredentials | None:
        """``innerClientAuthenticationCredentials`` parsed (load_broker_config has checked it), or None."""
        if not self.innerClientAuthenticationCredentials:
            return None
        value = json.loads(self.innerClientAuthenticationCredentials)
        return SessionCredentials(value["accessKey"], value["secretKey"])

    @property
    def register_period(self) -> float:
        """Seconds between registrations: ``registerNameServerPeriod`` kept within 10-60 s, as Apache's
        BrokerController does; the floor is ours to lower (``registerNameServerPeriodMin``)."""
        return min(max(self.registerNameServerPeriod, self.registerNameServerPeriodMin), 60000) / 1000.0

    @property
    def ha_server_addr(self) -> str:
        return f"{self.brokerIP2}:{self.haListenPort}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.split(";") if a.strip()]

    @property
    def is_slave(self) -> bool:
        return self.brokerRole == "SLAVE"

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in self.controllerAddr.split(";") if a.strip()]

    @property
    def is_sync_master(self) -> bool:
        return self.brokerRole == "SYNC_MASTER"

    @property
    def dledger_broker_id(self) -> int:
        """The brokerId this member registers with as a slave: the number after the first character of
        ``dLegerSelfId``, plus one (Apache's DLedgerCommitLog.getId; ``n0`` is brokerId 1)."""
        return int(self.dLegerSelfId[1:]) + 1


def dledger_config(broker: BrokerConfig, store: StoreConfig) -> DLedgerConfig:
    """The DLedgerConfig of this broker's member, as Apache's DLedgerCommitLog builds it: the group, peers and
    self id, the ledger under ``storePathRootDir/dledger-<selfId>`` in data files of ``mappedFileSizeCommitLog``
    bytes (in ``storePathDLedgerCommitLog`` if set: one directory, not several); raises DLedgerConfigError naming
    the key of a value that cannot work."""
    if not broker.dLegerGroup.strip():
        raise DLedgerConfigError("dLegerGroup: must be set with enableDLegerCommitLog=true")
    if not re.fullmatch(r".[0-9]{1,9}", broker.dLegerSelfId):
        raise DLedgerConfigError(
            f"dLegerSelfId: {broker.dLegerSelfId!r} is not a letter and a number, as n0 (the broker's id as a "
            "slave is that number + 1)"
        )
    data_path = store.storePathDLedgerCommitLog or None
    if data_path is not None:
        if MULTI_PATH_SPLITTER in data_path:
            raise DLedgerConfigError(
                f"storePathDLedgerCommitLog: {data_path!r} names several directories ('{MULTI_PATH_SPLITTER}'); "
                "one directory is supported"
            )
        if os.path.abspath(data_path) == os.path.abspath(store.commit_log_path):
            raise DLedgerConfigError(
                f"storePathDLedgerCommitLog: {data_path!r} is the commitlog's directory; the ledger's data files "
                "need their own (an existing commitlog is kept there as the ledger's first entries)"
            )
    timings = {_snake(key): getattr(broker, key) for key in DLEDGER_KEYS}
    return DLedgerConfig(
        group=broker.dLegerGroup.strip(),
        self_id=broker.dLegerSelfId,
        peers=parse_peers(broker.dLegerPeers),
        store=DLedgerStoreConfig(
            store_base_dir=store.storePathRootDir,
            self_id=broker.dLegerSelfId,
            mapped_file_size_for_entry_data=store.mappedFileSizeCommitLog,
            data_store_path=data_path,
        ),
        preferred_leader_ids=[i.strip() for i in broker.preferredLeaderId.split(";") if i.strip()],
        enable_batch_push=broker.enableBatchPush,
        **timings,
    )


def load_broker_config(
    path: str | None = None, overrides: dict[str, str] | None = None, defaults: dict[str, str] | None = None
) -> tuple[BrokerConfig, StoreConfig]:
    """Apply ``defaults`` (over the built-in ones), then broker.conf (if given), then ``overrides``; keys go to
    whichever config declares them."""
    broker = BrokerConfig()
    store = StoreConfig()
    targets = [broker, store]
    if defaults:
        apply_properties(targets, defaults, "defaults", ignore=SYSTEM_PROPERTY_PREFIXES)
    if path:
        apply_properties(targets, load_properties(path), path, ignore=SYSTEM_PROPERTY_PREFIXES)
        broker.brokerConfigPath = broker.brokerConfigPath or path
    if overrides:
        apply_properties(targets, overrides, "command line", ignore=SYSTEM_PROPERTY_PREFIXES)
    broker.__post_init__()
    _check_role(broker, store, path, overrides or {})
    _check_dledger(broker, store, path, overrides or {})
    _check_credentials(broker, path, overrides or {})
    _check_console_url(broker, path, overrides or {})
    problem = push_config_problem(broker)
    if problem is not None:
        source = "command line" if problem[0] in (overrides or {}) or not path else path
        raise ConfigError(f"{source}: key {problem[0]}: {problem[1]}")
    # The cluster and broker names are also topics (and lines in topics.json): the same rules apply.
    for key in ("brokerClusterName", "brokerName"):
        problem = topic_problem(getattr(broker, key))
        if problem is not None:
            source = "command line" if key in (overrides or {}) or not path else path
            raise ConfigError(f"{source}: key {key}: {problem}")
    if "NAMESRV_ADDR" in os.environ and not broker.namesrvAddr:
        broker.namesrvAddr = os.environ["NAMESRV_ADDR"]
    return broker, store


# Settings never printed (GET_BROKER_CONFIG) nor changed remotely (UPDATE_BROKER_CONFIG).
SECRET_KEYS = frozenset({"innerClientAuthenticationCredentials"})
_CREDENTIAL_KEYS = ("accessKey", "secretKey")


def _check_console_url(broker: BrokerConfig, path: str | None, overrides: dict[str, str]) -> None:
    url = urlsplit(broker.clusterConsoleUrl)
    if broker.clusterConsoleUrl and (url.scheme not in ("http", "https") or not url.netloc):
        source = "command line" if "clusterConsoleUrl" in overrides or not path else path
        raise ConfigError(f"{source}: key clusterConsoleUrl: not an http(s) URL: {broker.clusterConsoleUrl!r}")


def _check_credentials(broker: BrokerConfig, path: str | None, overrides: dict[str, str]) -> None:
    key = "innerClientAuthenticationCredentials"
    text = broker.innerClientAuthenticationCredentials
    if not text:
        return
    try:
        value = json.loads(text)
        ok = isinstance(value, dict) and all(isinstance(value.get(k), str) and value[k] for k in _CREDENTIAL_KEYS)
    except ValueError:
        ok = False
    if not ok:
        source = "command line" if key in overrides or not path else path
        raise ConfigError(f'{source}: key {key}: not a JSON object with "accessKey" and "secretKey"')


def _check_dledger(broker: BrokerConfig, store: StoreConfig, path: str | None, overrides: dict[str, str]) -> None:
    """enableDLegerCommitLog: the group, peers and self id must make a member (DLedgerConfig's checks), and not
    with controller mode (RocketMQ 5's BrokerStartup refuses both). The brokerId is -1 until DLedger elects, as
    Apache's BrokerStartup sets it."""

    def source(key: str) -> str:
        return "command line" if key in overrides or not path else path

    if not broker.enableDLegerCommitLog:
        return
    if broker.enableControllerMode:
        raise ConfigError(
            f"{source('enableDLegerCommitLog')}: key enableDLegerCommitLog: "
            "enableControllerMode and enableDLegerCommitLog cannot both be true"
        )
    try:
        dledger_config(broker, store)
    except DLedgerConfigError as e:
        raise dledger_config_error(e, source) from None
    broker.brokerId = -1


def dledger_config_error(error: DLedgerConfigError, source: Callable[[str], str]) -> ConfigError:
    """A DLedger setting that cannot work ("dLegerPeers: ...") as a ConfigError naming the key and where it
    was set (``source(key)``)."""
    key, _, problem = str(error).partition(" ")
    key = key.rstrip(":")
    return ConfigError(f"{source(key)}: key {key}: {problem}")


def _check_role(broker: BrokerConfig, store: StoreConfig, path: str | None, overrides: dict[str, str]) -> None:
    """BrokerStartup's rules: a master's brokerId forced to 0, a slave's above 0 (the role's value is one of
    KEY_RULES)."""

    def source(key: str) -> str:
        return "command line" if key in overrides or not path else path

    store.brokerRole = broker.brokerRole
    if broker.enableControllerMode:
        if not broker.controllerAddr.strip():
            raise ConfigError(f"{source('controllerAddr')}: key controllerAddr: must be set with enableControllerMode")
        return  # the controller gives the id and the role
    if broker.is_slave:
        if broker.brokerId <= 0:
            raise ConfigError(f"{source('brokerId')}: key brokerId: Slave's brokerId must be > 0")
    else:
        broker.brokerId = 0
