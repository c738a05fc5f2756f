"""Consumption statistics and offset tools for mqadmin, rocketmq-exporter and the Dashboard (the read-mostly
half of AdminBrokerProcessor): VIEW_BROKER_STATS_DATA, QUERY_CONSUME_TIME_SPAN,
QUERY_CONSUME_QUEUE, QUERY_CORRECTION_OFFSET, CLONE_GROUP_OFFSET and GET_ALL_PRODUCER_INFO."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from gateway.remoting import fastjson
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryCorrectionOffsetHeader,
    ViewBrokerStatsDataRequestHeader,
)

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

_CQ_UNIT = 20
# Java's Long.MAX_VALUE: QUERY_CORRECTION_OFFSET's "no correction needed" mark.
_LONG_MAX = (1 << 63) - 1


class AdminStatsProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_broker_stats_data,
            RequestCode.QUERY_CONSUME_TIME_SPAN: self.query_consume_time_span,
            RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue,
            RequestCode.QUERY_CORRECTION_OFFSET: self.query_correction_offset,
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
            RequestCode.GET_ALL_PRODUCER_INFO: self.get_all_producer_info,
        }

    def _mq(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(topic, self.broker.config.brokerName, queue_id)

    def view_broker_stats_data(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.decode(request.ext_fields)
        data = self.broker.stats.stats_data(h.stats_name, h.stats_key)
        if data is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        return request.response(body=fastjson.dumps(data))

    def query_consume_time_span(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        store = broker.store
        h = QueryConsumeTimeSpanRequestHeader.decode(request.ext_fields)
        tc = broker.topics.select(h.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        spans = []
        now = int(time.time() * 1000)
        for qid in range(tc.write_queue_nums):
            min_time = store.get_earliest_message_time(h.topic, qid)
            max_offset = store.get_max_offset_in_queue(h.topic, qid)
            consumer_offset = broker.offsets.query_offset(h.group, h.topic, qid)
            consume_time = min_time
            if consumer_offset > 0:
                consume_time = store.get_message_store_timestamp(h.topic, qid, consumer_offset - 1)
            span = {
                "consumeTimeStamp": consume_time,
                "delayTime": 0,
                "maxTimeStamp": store.get_message_store_timestamp(h.topic, qid, max_offset - 1),
                "messageQueue": self._mq(h.topic, qid),
                "minTimeStamp": min_time,
            }
            if consumer_offset < max_offset:
                span["delayTime"] = now - store.get_message_store_timestamp(h.topic, qid, consumer_offset)
            spans.append(span)
        return request.response(body=fastjson.dumps({"consumeTimeSpanSet": spans}))

    def query_consume_queue(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUME_QUEUE (mqadmin queryCq): up to ``count`` units from ``index``, with the group's
        subscription and filter when one is named."""
        broker = self.broker
        h = QueryConsumeQueueRequestHeader.decode(request.ext_fields)
        cq = broker.store.consume_queue_table.get((h.topic, h.queue_id))
        if cq is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": cq.max_offset_in_queue, "minQueueIndex": cq.min_offset_in_queue}
        if h.consumer_group is not None:
            cg = broker.consumers.get(h.consumer_group)
            sub = cg.find_subscription(h.topic) if cg is not None else None
            body["subscriptionData"] = sub
            if sub is None:
                body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                data = broker.consumer_filters.get(h.topic, h.consumer_group)
                body["filterData"] = _filter_data_json(data)
        units = cq.get_index_buffer(h.index) if h.index >= 0 else None
        if units is None:
            return request.response(ResponseCode.SUCCESS, f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!")
        count = max(h.count, 0)
        rows = []
        for i in range(0, min(len(units), count * _CQ_UNIT), _CQ_UNIT):
            unit = units[i : i + _CQ_UNIT]
            rows.append(
                {
                    "eval": False,
                    "physicOffset": int.from_bytes(unit[0:8], "big", signed=True),
                    "physicSize": int.from_bytes(unit[8:12], "big", signed=True),
                    "tagsCode": int.from_bytes(unit[12:20], "big", signed=True),
                }
            )
        body["queueData"] = rows
        return request.response(body=fastjson.dumps(body))

    def query_correction_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """The lowest offset of each queue over every group but ``filterGroups`` (offsets below the queue's
        start left out); a queue where ``compareGroup`` is behind that gets Long.MAX_VALUE
        (queryMinOffsetInAllGroup and its comparison)."""
        offsets = self.broker.offsets
        store = self.broker.store
        h = QueryCorrectionOffsetHeader.decode(request.ext_fields)
        skip = {g.strip() for g in (h.filter_groups or "").split(",") if g.strip()}
        correction: dict[int, int] = {}
        for key, table in offsets.offset_table.items():
            topic, _, group = key.rpartition("@")
            if topic != h.topic or group in skip:
                continue
            for qid, offset in table.items():
                if offset < store.get_min_offset_in_queue(h.topic, qid):
                    continue
                correction[qid] = min(correction.get(qid, offset), offset)
        compare = offsets.offset_table.get(f"{h.topic}@{h.compare_group}", {})
        for qid, offset in compare.items():
            low = correction.get(qid)
            if low is not None:
                correction[qid] = _LONG_MAX if low > offset else low
        return request.response(body=fastjson.dumps({"correctionOffsets": dict(sorted(correction.items()))}))

    def clone_group_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Copy ``srcGroup``'s offsets to ``destGroup`` (mqadmin cloneGroupOffset), topic by topic."""
        broker = self.broker
        h = CloneGroupOffsetRequestHeader.decode(request.ext_fields)
        topics = [h.topic] if h.topic else sorted(broker.offsets.topics_of_group(h.src_group))
        for topic in topics:
            if broker.topics.select(topic) is None or not (h.offline or broker.subscribes(h.src_group, topic)):
                continue
            broker.offsets.clone_offset(h.src_group, h.dest_group, topic)
        return request.response(ResponseCode.SUCCESS)

    def get_all_producer_info(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        data = {
            group: [
                {
                    "clientId": info.client_id,
                    "language": info.language,
                    "lastUpdateTimestamp": info.last_update_timestamp,
                    "remoteIP": f"/{ch.peer}",  # Netty's remoteAddress().toString()
                    "version": info.version,
                }
                for ch, info in channels.items()
            ]
            for group, channels in self.broker.producers.table.items()
            if channels
        }
        return request.response(body=fastjson.dumps({"data": data}))


def _filter_data_json(data: Any) -> str:
    """ConsumerFilterData as Java's JSON.toJSONString(data, true) prints it; "null" for a tag subscription."""
    if data is None:
        return "null"
    fields = {
        "bornTime": 0,
        "clientVersion": data.client_version,
        "consumerGroup": data.consumer_group,
        "deadTime": 0,
        "dead": False,
        "expression": data.expression,
        "expressionType": data.expression_type,
        "topic": data.topic,
    }
    return orjson.dumps(fields, option=orjson.OPT_INDENT_2).decode()
