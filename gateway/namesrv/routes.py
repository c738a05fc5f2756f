"""RouteInfoManager: the name server's tables of clusters, brokers, topics and live brokers.

Plain objects driven by the caller: no reactor, no I/O, time from an injected ``now`` (epoch ms).
A *channel* is whatever connection object the caller registers a broker with; it is only compared
by identity here. The rules follow RocketMQ 4.9's RouteInfoManager.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from twisted.logger import Logger

from gateway.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from gateway.remoting.codes import PermName

log = Logger()

MASTER_ID = 0
BROKER_CHANNEL_EXPIRED_TIME = 120_000

# TopicSysFlag bits.
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class BrokerLiveInfo:
    """What the name server knows of a registered broker address."""

    last_update_timestamp: int
    data_version: DataVersion
    channel: Any
    ha_server_addr: str


@dataclass(slots=True)
class RegisterBrokerResult:
    """For a slave whose master is live: the master's address and HA address."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteInfoManager:
    """Route tables, registration, expiry and the admin queries over them."""

    def __init__(
        self, now: Callable[[], int] = _now_ms, broker_channel_expired_time: int = BROKER_CHANNEL_EXPIRED_TIME
    ) -> None:
        self.now = now
        self.broker_channel_expired_time = broker_channel_expired_time
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # -- registration

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper,
        filter_server_list: list[str] | None,
        channel: Any,
    ) -> RegisterBrokerResult:
        """REGISTER_BROKER. The topic table may be incremental: topics absent from it are kept."""
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)

        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster_name, broker_name=broker_name)
            self.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        # A slave switched to master (or back) keeps its address: one id per address.
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID and old_addr != broker_addr:
            log.info(
                "cluster [{cluster}] brokerName [{name}] master address change from {old} to {new}",
                cluster=broker_data.cluster,
                name=broker_name,
                old=old_addr,
                new=broker_addr,
            )
        register_first = register_first or old_addr is None

        # Only the master's topics make routes, and only when they changed since its last registration.
        if broker_id == MASTER_ID and (
            register_first or self.is_broker_topic_config_changed(broker_addr, topic_config_wrapper.data_version)
        ):
            for topic_config in topic_config_wrapper.topic_config_table.values():
                self._create_and_update_queue_data(broker_name, topic_config)

        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self.now(), topic_config_wrapper.data_version, channel, ha_server_addr
        )
        if previous is None:
            log.info("new broker registered, {addr} HAServer: {ha}", addr=broker_addr, ha=ha_server_addr)

        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = filter_server_list
            else:
                self.filter_server_table.pop(broker_addr, None)

        result = RegisterBrokerResult()
        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get(master_addr) if master_addr else None
            if master_live is not None:
                result.ha_server_addr = master_live.ha_server_addr
                result.master_addr = master_addr
        return result

    def _create_and_update_queue_data(self, broker_name: str, topic_config: TopicConfig) -> None:
        queue_data = QueueData(
            broker_name=broker_name,
            read_queue_nums=topic_config.read_queue_nums,
            write_queue_nums=topic_config.write_queue_nums,
            perm=topic_config.perm,
            topic_sys_flag=topic_config.topic_sys_flag,
        )
        queue_datas = self.topic_queue_table.get(topic_config.topic_name)
        if queue_datas is None:
            self.topic_queue_table[topic_config.topic_name] = {broker_name: queue_data}
            log.info("new topic registered, {topic} {qd}", topic=topic_config.topic_name, qd=queue_data)
            return
        old = queue_datas.get(broker_name)
        queue_datas[broker_name] = queue_data
        if old is not None and old != queue_data:
            log.info(
                "topic changed, {topic} OLD: {old} NEW: {new}", topic=topic_config.topic_name, old=old, new=queue_data
            )

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """UNREGISTER_BROKER: forget one address; the broker name goes with its last address."""
        removed = self.broker_live_table.pop(broker_addr, None)
        log.info("unregisterBroker {addr}, was live: {live}", addr=broker_addr, live=removed is not None)
        self.filter_server_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            return
        broker_data.broker_addrs.pop(broker_id, None)
        if not broker_data.broker_addrs:
            self._remove_broker_name(broker_name, [cluster_name])

    def _remove_broker_name(self, broker_name: str, clusters: Iterable[str]) -> None:
        """Drop a broker name that has no address left: from its cluster, and its queues from every topic."""
        del self.broker_addr_table[broker_name]
        for cluster in clusters:
            names = self.cluster_addr_table.get(cluster)
            if names is not None and broker_name in names:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
                break
        for topic in list(self.topic_queue_table):
            queue_datas = self.topic_queue_table[topic]
            queue_datas.pop(broker_name, None)
            if not queue_datas:
                log.info("remove topic {topic}: no broker serves it any more", topic=topic)
                del self.topic_queue_table[topic]

    # -- liveness

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        """True unless ``data_version`` equals the one the broker last registered with."""
        return self.query_broker_topic_config(broker_addr) != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        """The DataVersion the broker at ``broker_addr`` last registered with, if it is live."""
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        """Mark a live broker as seen now (QUERY_DATA_VERSION with an unchanged version)."""
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_timestamp = self.now()

    def scan_not_active_broker(self) -> list[BrokerLiveInfo]:
        """Remove brokers not heard from for ``broker_channel_expired_time``; return them so their channels close."""
        deadline = self.now() - self.broker_channel_expired_time
        expired = [
            (addr, live) for addr, live in self.broker_live_table.items() if live.last_update_timestamp < deadline
        ]
        for addr, _live in expired:
            log.warn("The broker channel expired, {addr} {ms}ms", addr=addr, ms=self.broker_channel_expired_time)
            self._remove_broker_addr(addr)
        return [live for _addr, live in expired]

    def on_channel_destroy(self, remote_addr: str, channel: Any) -> None:
        """A connection closed: remove at once every broker that registered through it.

        With none, the peer's ``remote_addr`` is tried as a broker address, as Java does.
        """
        found = [addr for addr, live in self.broker_live_table.items() if live.channel is channel]
        for addr in found:
            log.info("the broker's channel destroyed, {addr}, clean its data at once", addr=addr)
        for addr in found or [remote_addr]:
            self._remove_broker_addr(addr)

    def _remove_broker_addr(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            ids = [i for i, a in broker_data.broker_addrs.items() if a == broker_addr]
            if not ids:
                continue
            for broker_id in ids:
                del broker_data.broker_addrs[broker_id]
            log.info("remove brokerAddr[{ids}, {addr}] from brokerAddrTable", ids=ids, addr=broker_addr)
            if not broker_data.broker_addrs:
                self._remove_broker_name(broker_name, list(self.cluster_addr_table))
            return

    # -- queries

    def pick_up_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``; None unless it has both queue data and broker data."""
        queue_datas = self.topic_queue_table.get(topic)
        if not queue_datas:
            return None
        route = TopicRouteData(queue_datas=[replace(qd) for qd in queue_datas.values()])
        for broker_name in queue_datas:
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None:
                continue
            # Ascending ids: the order Java's HashMap<Long, String> iterates small ids in.
            addrs = dict(sorted(broker_data.broker_addrs.items()))
            route.broker_datas.append(replace(broker_data, broker_addrs=addrs))
            for addr in addrs.values():
                filter_servers = self.filter_server_table.get(addr)
                if filter_servers is not None:
                    route.filter_server_table[addr] = filter_servers
        return route if route.broker_datas else None

    def get_all_cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        return ClusterInfo(
            broker_addr_table=dict(self.broker_addr_table),
            cluster_addr_table={cluster: list(names) for cluster, names in self.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> TopicList:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        return TopicList(list(self.topic_queue_table))

    def get_topics_by_cluster(self, cluster: str) -> TopicList:
        """Topics with a queue on any broker of ``cluster``."""
        names = self.cluster_addr_table.get(cluster, set())
        return TopicList([t for t, qds in self.topic_queue_table.items() if not names.isdisjoint(qds)])

    def get_system_topic_list(self) -> TopicList:
        """Cluster and broker names (each is a system topic) and one broker address to ask for the rest."""
        topics: dict[str, None] = {}
        for cluster, names in self.cluster_addr_table.items():
            topics[cluster] = None
            topics.update(dict.fromkeys(names))
        broker_addr = next((a for bd in self.broker_addr_table.values() for a in bd.broker_addrs.values()), None)
        return TopicList(list(topics), broker_addr)

    def get_unit_topics(self) -> TopicList:
        """Topics flagged as unit topics."""
        return self._topics_where(lambda flag: bool(flag & FLAG_UNIT))

    def get_has_unit_sub_topic_list(self) -> TopicList:
        """Topics flagged as having unit subscriptions."""
        return self._topics_where(lambda flag: bool(flag & FLAG_UNIT_SUB))

    def get_has_unit_sub_un_unit_topic_list(self) -> TopicList:
        """Non-unit topics flagged as having unit subscriptions."""
        return self._topics_where(lambda flag: not flag & FLAG_UNIT and bool(flag & FLAG_UNIT_SUB))

    def _topics_where(self, predicate: Callable[[int], bool]) -> TopicList:
        # Java looks at one QueueData per topic only.
        return TopicList(
            [t for t, qds in self.topic_queue_table.items() if predicate(next(iter(qds.values())).topic_sys_flag)]
        )

    # -- admin

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear PERM_WRITE on every queue of ``broker_name``; return how many topics it touched."""
        return self._operate_write_perm(broker_name, lambda perm: perm & ~PermName.PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Set read+write perm on every queue of ``broker_name``; return how many topics it touched."""
        return self._operate_write_perm(broker_name, lambda _perm: PermName.PERM_READ | PermName.PERM_WRITE)

    def _operate_write_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        for queue_datas in self.topic_queue_table.values():
            queue_data = queue_datas.get(broker_name)
            if queue_data is not None:
                queue_data.perm = change(queue_data.perm)
                count += 1
        return count

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV: everywhere, or only on the brokers of ``cluster_name``."""
        if not cluster_name:
            self.topic_queue_table.pop(topic, None)
            return
        queue_datas = self.topic_queue_table.get(topic)
        if queue_datas is None:
            return
        for broker_name in self.cluster_addr_table.get(cluster_name, ()):
            queue_datas.pop(broker_name, None)
        if not queue_datas:
            del self.topic_queue_table[topic]
