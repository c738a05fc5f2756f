"""Topic, group, offset and status requests from admin tools and clients (AdminBrokerProcessor)."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
from twisted.internet.defer import Deferred
from twisted.internet.task import Cooperator
from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import KVTable, MessageQueue, SubscriptionGroupConfig, TopicConfig, TopicList
from gateway.remoting.codes import SERVER_VERSION, PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetSubscriptionGroupConfigRequestHeader,
    OffsetResponseHeader,
    ProducerGroupRequestHeader,
    ResumeCheckHalfMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    TopicRequestHeader,
    ext_value,
)
from gateway.remoting.message import MessageConst, decode_offset_message_id
from gateway.remoting.names import (
    REPLY_TOPIC_POSTFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
)
from gateway.store.api import PutMessageResult

from ..inner import inner_from_ext, look_message, when_put
from ..stats import GROUP_GET_NUMS

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

log = Logger()

_PERM_ALL = PermName.PERM_PRIORITY | PermName.PERM_READ | PermName.PERM_WRITE | PermName.PERM_INHERIT
# How long heavy admin work may hold the reactor before other connections get their turn.
_SLICE_SECONDS = 0.002
# AdminBrokerProcessor.validateSlave's words (4.9.8 and 5.x).
_SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, please execute it from master broker."


class AdminBrokerProcessor:
    """Everything that is not send, pull, heartbeat or offsets."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self._cooperator = Cooperator(
            terminationPredicateFactory=lambda: _Slice(_SLICE_SECONDS),
            scheduler=lambda work: broker.reactor.callLater(0, work),
        )

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_BROKER_HA_STATUS: self.get_broker_ha_status,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_BROKER_CONSUME_STATS: self.get_broker_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.GET_TOPIC_CONFIG: self.get_topic_config,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_subscription_group,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.get_system_topic_list,
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_consume_queue,
            RequestCode.DELETE_EXPIRED_COMMITLOG: self.delete_expired_commit_log,
            RequestCode.CLEAN_UNUSED_TOPIC: self.clean_unused_topic,
            RequestCode.RESUME_CHECK_HALF_MESSAGE: self.resume_check_half_message,
        }

    # -- topics

    def update_and_create_topic(
        self, channel: RemotingProtocol, request: RemotingCommand
    ) -> RemotingCommand | Deferred[RemotingCommand]:
        broker = self.broker
        if broker.config.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REMARK)
        h = CreateTopicRequestHeader.decode(request.ext_fields)
        refusal = self._reserved_topic(h.topic)
        if refusal is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, refusal)
        limit = broker.config.maxTopicQueueNums
        for key, n in (("readQueueNums", h.read_queue_nums), ("writeQueueNums", h.write_queue_nums)):
            if not 0 <= n <= limit:
                return request.response(
                    ResponseCode.INVALID_PARAMETER, f"{key} {n} is out of range [0, {limit}] (maxTopicQueueNums)"
                )
        if not 0 <= h.perm <= _PERM_ALL:
            return request.response(ResponseCode.INVALID_PARAMETER, f"perm {h.perm} is not a valid permission")
        topics_version = broker.topics.data_version.counter
        written = broker.topics.update_topic_config(
            TopicConfig(
                h.topic,
                read_queue_nums=h.read_queue_nums,
                write_queue_nums=h.write_queue_nums,
                perm=h.perm,
                topic_filter_type=h.topic_filter_type,
                topic_sys_flag=h.topic_sys_flag or 0,
                order=h.order,
            )
        )
        # Apache registers the topic with the NameServers before it answers (registerIncrementBrokerData): the
        # route has this broker's queues once mqadmin updateTopic returns.
        return _success_when(written, request).addCallback(
            lambda response: broker.answer_once_registered(topics_version, response)
        )

    def delete_topic(
        self, channel: RemotingProtocol, request: RemotingCommand
    ) -> RemotingCommand | Deferred[RemotingCommand]:
        broker = self.broker
        if broker.config.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REMARK)
        h = TopicRequestHeader.decode(request.ext_fields)
        refusal = self._reserved_topic(h.topic)
        if refusal is not None:
            return request.response(ResponseCode.INVALID_PARAMETER, refusal)
        written = broker.topics.delete_topic_config(h.topic)
        broker.offsets.remove_topic(h.topic)
        broker.pop.inflight.clear_topic(h.topic)
        broker.store.delete_topics({h.topic})
        return _success_when(written, request)

    def _reserved_topic(self, topic: str) -> str | None:
        """Why ``topic`` may not be created or deleted by a client: system topics (validateSystemTopicWhenUpdateTopic)
        and the broker's own cluster, broker and reply topics."""
        cfg = self.broker.config
        if is_system_topic(topic) or topic == cfg.msgTraceTopicName:
            return f"The topic[{topic}] is conflict with system topic."
        if topic in (cfg.brokerClusterName, cfg.brokerName, f"{cfg.brokerClusterName}_{REPLY_TOPIC_POSTFIX}"):
            return f"the topic[{topic}] is conflict with system reserved words."
        return None

    def get_all_topic_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        # Apache's reply has an empty extFields object here (and none in the other getAll* replies).
        return request.response(ext_fields={}, body=fastjson.dumps(self.broker.topics.wrapper()))

    def get_topic_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Apache's TopicConfigAndQueueMapping: the topic's config; no ``mappingDetail`` (no static topics here)."""
        h = TopicRequestHeader.decode(request.ext_fields)
        tc = self.broker.topics.select(h.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {h.topic}")
        return request.response(body=fastjson.dumps(tc))

    def get_system_topic_list(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """TopicValidator's system topic set, whether or not this broker has them."""
        return request.response(body=fastjson.dumps(TopicList(sorted(SYSTEM_TOPICS))))

    # -- store maintenance (mqadmin cleanExpiredCQ, deleteExpiredCommitLog, cleanUnusedTopic)

    def clean_expired_consume_queue(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        log.warn("invoke cleanExpiredConsumeQueue start.")
        gone = self.broker.store.clean_expired_consume_queues()
        log.warn("invoke cleanExpiredConsumeQueue end: {n} queue(s) deleted.", n=gone)
        return request.response(ResponseCode.SUCCESS)

    def delete_expired_commit_log(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Delete expired commitlog files at the next cleaning rounds, whatever ``deleteWhen`` says."""
        log.warn("invoke deleteExpiredCommitLog start.")
        clean = self.broker.clean_service
        if clean is not None:
            clean.execute_delete_files_manually()
        log.warn("invoke deleteExpiredCommitLog end.")
        return request.response(ResponseCode.SUCCESS)

    def clean_unused_topic(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Delete the consume queues of topics this broker no longer has (the delay and op-half queues kept)."""
        log.warn("invoke cleanUnusedTopic start.")
        store = self.broker.store
        keep = set(self.broker.topics.table) | {SCHEDULE_TOPIC, TRANS_OP_HALF_TOPIC}
        unused = {topic for topic, _ in store.consume_queue_table if topic not in keep}
        gone = store.delete_topics(unused)
        log.warn("invoke cleanUnusedTopic end: {n} queue(s) of {t} topic(s) deleted.", n=gone, t=len(unused))
        return request.response(ResponseCode.SUCCESS)

    # -- transactions

    def resume_check_half_message(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """Put a half message (by offsetMsgId) back with its check count at 0, so the broker checks it again
        (mqadmin resumeCheckHalfMessage)."""
        h = ResumeCheckHalfMessageRequestHeader.decode(request.ext_fields)
        try:
            _, offset = decode_offset_message_id(h.msg_id or "")
        except ValueError:
            ext = None
        else:
            ext = look_message(self.broker.store, offset)
        if ext is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "Exception was thrown when putting message back to RMQ_SYS_TRANS_HALF_TOPIC."
            )
        props = dict(ext.properties)
        props[MessageConst.TRANSACTION_CHECK_TIMES] = "0"
        put = self.broker.store.put_message(inner_from_ext(ext, TRANS_HALF_TOPIC, 0, props))
        return when_put(put, lambda result: self._put_back(request, result, props))

    @staticmethod
    def _put_back(request: RemotingCommand, result: PutMessageResult, props: dict[str, str]) -> RemotingCommand:
        if not result.ok:
            log.error("Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.")
            return request.response(ResponseCode.SYSTEM_ERROR, "Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.")
        log.info(
            "Put message back to RMQ_SYS_TRANS_HALF_TOPIC. real topic={topic}",
            topic=props.get(MessageConst.REAL_TOPIC),
        )
        return request.response(ResponseCode.SUCCESS)

    # -- queue offsets

    def get_max_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.decode(request.ext_fields)
        offset = self.broker.store.get_max_offset_in_queue(h.topic, h.queue_id)
        return request.response(ext_fields=OffsetResponseHeader(offset).encode())

    def get_min_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.decode(request.ext_fields)
        offset = self.broker.store.get_min_offset_in_queue(h.topic, h.queue_id)
        return request.response(ext_fields=OffsetResponseHeader(offset).encode())

    def search_offset_by_timestamp(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.decode(request.ext_fields)
        offset = self.broker.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return request.response(ext_fields=OffsetResponseHeader(offset).encode())

    def get_earliest_msg_storetime(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.decode(request.ext_fields)
        ts = self.broker.store.get_earliest_message_time(h.topic, h.queue_id)
        return request.response(ext_fields=GetEarliestMsgStoretimeResponseHeader(ts).encode())

    # -- status for mqadmin

    def get_broker_ha_status(self, _channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_HA_STATUS (mqadmin haStatus): HARuntimeInfo of this broker's side of replication."""
        broker = self.broker
        if broker.config.is_slave and broker.ha_client is not None:
            info = broker.ha_client.runtime_info()
        elif broker.ha_service is not None:
            info = broker.ha_service.runtime_info()
        else:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "Can not get HARuntimeInfo, may be duplicationEnable is true"
            )
        return request.response(body=fastjson.dumps(info))

    def get_broker_runtime_info(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        store = broker.store
        cfg = broker.config
        uptime = int(time.time() * 1000) - broker.boot_timestamp
        tps = f"{broker.put_tps():.2f} {broker.put_tps():.2f} {broker.put_tps():.2f}"
        get_tps = f"{broker.get_tps():.2f} {broker.get_tps():.2f} {broker.get_tps():.2f}"
        counts = broker.message_counts
        put_size = sum(counts.bytes_in.values())
        put_times = sum(counts.puts(topic) for topic in list(counts.messages_in))
        root = broker.store_config.storePathRootDir
        usage = shutil.disk_usage(root)
        disk_ratio = f"{broker.disk_ratio()}"
        flush_behind = store.get_max_phy_offset() - store.flushed_where
        table = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": str(SERVER_VERSION),
            "msgPutTotalYesterdayMorning": "0",
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalTodayNow": str(broker.put_total),
            "msgGetTotalYesterdayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalTodayNow": str(broker.get_total),
            "putTps": tps,
            "getFoundTps": get_tps,
            "getMissTps": "0.00 0.00 0.00",
            "getTotalTps": get_tps,
            "getTransferedTps": get_tps,
            # One reactor thread: requests never queue behind a pool.
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueCapacity": str(cfg.sendThreadPoolQueueCapacity),
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueCapacity": str(cfg.pullThreadPoolQueueCapacity),
            "queryThreadPoolQueueSize": "0",
            "queryThreadPoolQueueCapacity": str(cfg.queryThreadPoolQueueCapacity),
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": str(cfg.endTransactionPoolQueueCapacity),
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": str(broker.earliest_message_time()),
            "startAcceptSendRequestTimeStamp": str(cfg.startAcceptSendRequestTimeStamp),
            f"commitLogDiskRatio_{broker.store_config.commit_log_path}": disk_ratio,
            "commitLogDiskRatio": disk_ratio,
            "consumeQueueDiskRatio": disk_ratio,
            "commitLogMinOffset": str(store.get_min_phy_offset()),
            "commitLogMaxOffset": str(store.get_max_phy_offset()),
            "commitLogDirCapacity": f"Total : {_human_bytes(usage.total)}, Free : {_human_bytes(usage.free)}.",
            "remainTransientStoreBufferNumbs": str(2**31 - 1),  # Integer.MAX_VALUE: no transient store pool
            "remainHowManyDataToFlush": _human_bytes(max(flush_behind, 0)),
            "dispatchBehindBytes": str(broker.dispatch_behind()),
            "dispatchMaxBuffer": "0",
            "bootTimestamp": str(broker.boot_timestamp),
            "runtime": f"[ {uptime // 86400000} days, {uptime // 3600000 % 24} hours, "
            f"{uptime // 60000 % 60} minutes, {uptime // 1000 % 60} seconds ]",
            "putMessageAverageSize": str(put_size / max(put_times, 1)),
            "putMessageSizeTotal": str(put_size),
            "putMessageTimesTotal": str(max(put_times, 1)),
            "putMessageFailedTimes": "0",
            "putMessageEntireTimeMax": "0",
            "getMessageEntireTimeMax": "0",
            "putMessageDistributeTime": "[<=0ms]:0 [0~10ms]:0 [10~50ms]:0 [50~100ms]:0 [100~200ms]:0 "
            "[200~500ms]:0 [500ms~1s]:0 [1~2s]:0 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:0 ",
            "putLatency99": "0.00",
            "putLatency999": "0.00",
            "totalMemKBytes": "0",
            "brokerActive": "true",
        }
        for level, offset in sorted(broker.schedule.offset_table.items()):
            end = store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            table[f"scheduleMessageOffset_{level}"] = f"{offset},{end}"
        if broker.dledger is not None:
            table.update(broker.dledger.runtime_info())
        return request.response(body=fastjson.dumps(KVTable(table)))

    def get_topic_stats_info(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        broker = self.broker
        h = TopicRequestHeader.decode(request.ext_fields)
        tc = broker.topics.select(h.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = broker.store

        def rows() -> Iterator[tuple[MessageQueue, dict[str, int]]]:
            for qid in range(tc.write_queue_nums):
                min_o = max(store.get_min_offset_in_queue(h.topic, qid), 0)
                max_o = max(store.get_max_offset_in_queue(h.topic, qid), 0)
                last = store.get_message_store_timestamp(h.topic, qid, max_o - 1) if max_o > 0 else 0
                mq = MessageQueue(h.topic, broker.config.brokerName, qid)
                yield mq, {"lastUpdateTimestamp": last, "maxOffset": max_o, "minOffset": min_o}

        return self._offset_table(request, b"", rows())

    def get_consume_stats(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        broker = self.broker
        h = GetConsumeStatsRequestHeader.decode(request.ext_fields)
        topics = [h.topic] if h.topic else sorted(broker.offsets.topics_of_group(h.consumer_group))

        def rows() -> Iterator[tuple[MessageQueue, dict[str, int]]]:
            for topic in topics:
                tc = broker.topics.select(topic)
                if tc is None or not broker.subscribes(h.consumer_group, topic):
                    continue
                for qid in range(tc.read_queue_nums):
                    mq = MessageQueue(topic, broker.config.brokerName, qid)
                    yield mq, _offset_row(broker, h.consumer_group, topic, qid)

        tps = sum(broker.stats.tps(GROUP_GET_NUMS, f"{topic}@{h.consumer_group}") for topic in topics)
        return self._offset_table(request, b'"consumeTps":%s,' % orjson.dumps(float(tps)), rows())

    def get_broker_consume_stats(self, channel: RemotingProtocol, request: RemotingCommand) -> Deferred[Any]:
        """ConsumeStatsList: for every subscription group, the ConsumeStats of each topic it has offsets for
        (only ordered topics with ``isOrder``), and the broker's total lag; walked in short slices of reactor
        time, as the other offset tables are."""
        broker = self.broker
        h = GetConsumeStatsInBrokerHeader.decode(request.ext_fields)
        topics_by_group: dict[str, set[str]] = {}
        for key in list(broker.offsets.offset_table):
            topic, _, group = key.rpartition("@")
            topics_by_group.setdefault(group, set()).add(topic)
        per_group: list[dict[str, list[dict[str, Any]]]] = []
        total_diff = 0

        def steps() -> Iterator[None]:
            nonlocal total_diff
            for group in list(broker.groups.table):
                stats_list: list[dict[str, Any]] = []
                for topic in sorted(topics_by_group.get(group, ())):
                    tc = broker.topics.select(topic)
                    if tc is None or (h.is_order and not tc.order) or not broker.subscribes(group, topic):
                        continue
                    table = {}
                    for qid in range(tc.write_queue_nums):
                        row = _offset_row(broker, group, topic, qid)
                        table[MessageQueue(topic, broker.config.brokerName, qid)] = row
                        total_diff += row["brokerOffset"] - row["consumerOffset"]
                        yield
                    tps = broker.stats.tps(GROUP_GET_NUMS, f"{topic}@{group}")
                    stats_list.append({"consumeTps": tps, "offsetTable": table})
                per_group.append({group: stats_list})
                yield

        def answer(_: Any) -> RemotingCommand:
            body = {"brokerAddr": broker.config.broker_addr, "consumeStatsList": per_group, "totalDiff": total_diff}
            return request.response(body=fastjson.dumps(body))

        return self._cooperator.cooperate(steps()).whenDone().addCallback(answer)

    def _offset_table(
        self, request: RemotingCommand, head: bytes, rows: Iterator[tuple[MessageQueue, dict[str, int]]]
    ) -> Deferred[RemotingCommand]:
        """Answer ``{<head>"offsetTable":{queue:row,...}}`` (fastjson's object keys), walking ``rows`` in short
        slices of reactor time (Twisted's Cooperator) and serializing each row as it comes, so a request
        over many queues never holds the other connections for long."""
        entries: list[bytes] = []

        def steps() -> Iterator[None]:
            for mq, row in rows:
                entries.append(b"%s:%s" % (fastjson.dumps(mq), orjson.dumps(row)))
                yield

        done = self._cooperator.cooperate(steps()).whenDone()
        return done.addCallback(lambda _: request.response(body=b'{%s"offsetTable":{%s}}' % (head, b",".join(entries))))

    def get_consumer_connection_list(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.decode(request.ext_fields)
        cg = self.broker.consumers.get(h.consumer_group)
        if cg is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumer_group}] not online"
            )
        body = {
            "connectionSet": [_connection(i) for i in cg.channels.values()],
            "consumeFromWhere": cg.consume_from_where.name,
            "consumeType": cg.consume_type.name,
            "messageModel": cg.message_model.name,
            "subscriptionTable": {t: s.to_json() for t, s in cg.subscription_table.items()},
        }
        return request.response(body=fastjson.dumps(body))

    def get_producer_connection_list(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = ProducerGroupRequestHeader.decode(request.ext_fields)
        channels = self.broker.producers.table.get(h.producer_group)
        if not channels:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist")
        return request.response(body=fastjson.dumps({"connectionSet": [_connection(i) for i in channels.values()]}))

    def query_topic_consume_by_who(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        h = TopicRequestHeader.decode(request.ext_fields)
        groups = set(broker.offsets.groups_of_topic(h.topic))
        groups.update(g for g, cg in broker.consumers.table.items() if h.topic in cg.subscription_table)
        return request.response(body=fastjson.dumps({"groupList": sorted(groups)}))

    # -- groups and offsets

    def get_all_consumer_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=fastjson.dumps({"offsetTable": self.broker.offsets.offset_table}))

    def get_all_subscription_group(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        groups = self.broker.groups
        body = {
            "dataVersion": groups.data_version.to_json(),
            "subscriptionGroupTable": {k: v.to_json() for k, v in groups.table.items()},
        }
        return request.response(body=fastjson.dumps(body))

    def get_subscription_group(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = GetSubscriptionGroupConfigRequestHeader.decode(request.ext_fields)
        cfg = self.broker.groups.find(h.group)
        if cfg is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return request.response(body=fastjson.dumps(cfg.to_json()))

    def update_and_create_subscription_group(
        self, channel: RemotingProtocol, request: RemotingCommand
    ) -> RemotingCommand | Deferred[RemotingCommand]:
        if self.broker.config.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REMARK)
        cfg = SubscriptionGroupConfig.from_json(fastjson.loads(request.body))  # checks groupName and field types
        limit = self.broker.config.maxTopicQueueNums
        if not 0 <= cfg.retry_queue_nums <= limit:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"retryQueueNums {cfg.retry_queue_nums} is out of range [0, {limit}] (maxTopicQueueNums)",
            )
        return _success_when(self.broker.groups.update(cfg), request)

    def delete_subscription_group(
        self, channel: RemotingProtocol, request: RemotingCommand
    ) -> RemotingCommand | Deferred[RemotingCommand]:
        if self.broker.config.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REMARK)
        h = DeleteSubscriptionGroupRequestHeader.decode(request.ext_fields)
        # The revive service passes over the checkpoints of a group that is gone: they will not count down.
        self.broker.pop.inflight.clear_group(h.group_name)
        return _success_when(self.broker.groups.delete(h.group_name), request)

    def get_broker_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        # As Java's Configuration prints it: unset (null) settings left out, booleans lower-case.
        lines = [f"{k}={ext_value(v)}" for k, v in sorted(broker.all_config().items()) if v is not None]
        version = orjson.dumps(broker.topics.data_version.to_json()).decode()
        return request.response(ext_fields={"version": version}, body="\n".join(lines).encode())


def _success_when(written: Deferred[None], request: RemotingCommand) -> Deferred[RemotingCommand]:
    """SUCCESS once a config change is on disk: Apache answers these admin requests after persisting."""
    return written.addCallback(lambda _: request.response(ResponseCode.SUCCESS))


def _offset_row(broker: BrokerController, group: str, topic: str, queue_id: int) -> dict[str, int]:
    """OffsetWrapper, as fastjson writes it: 5.x's pullOffset (never below the committed offset; pops keep
    none), and ``popInflight``, the messages popped and neither acked nor revived, when there are some (an
    extra field the Java admin ignores: Apache shows that count only in its metrics)."""
    broker_offset, consumed, last = broker.consume_progress(group, topic, queue_id)
    pulled, popped = broker.inflight(group, topic, queue_id)
    row = {"brokerOffset": broker_offset, "consumerOffset": consumed, "lastTimestamp": last}
    if popped:
        row["popInflight"] = popped
    row["pullOffset"] = consumed + pulled
    return row


def _human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false): binary units, one decimal."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _connection(info: Any) -> dict[str, Any]:
    return {
        "clientAddr": info.channel.peer,
        "clientId": info.client_id,
        "language": info.language,
        "version": info.version,
    }


class _Slice:
    """A Cooperator termination predicate: true once ``seconds`` have passed since it was made."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def __call__(self) -> bool:
        return time.monotonic() >= self.end
