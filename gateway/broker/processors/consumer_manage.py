"""GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET (ConsumerManageProcessor)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    ConsumerGroupRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController


class ConsumerManageProcessor:
    """Group membership (rebalance input) and committed offsets."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list_by_group,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
        }

    def get_consumer_list_by_group(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        header = ConsumerGroupRequestHeader.decode(request.ext_fields)
        cg = self.broker.consumers.get(header.consumer_group)
        ids = cg.client_ids() if cg else []
        if not ids:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}")
        return request.response(body=orjson.dumps({"consumerIdList": ids}))

    def query_consumer_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.decode(request.ext_fields)
        broker = self.broker
        offset = broker.offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset >= 0:
            return request.response(ext_fields=OffsetResponseHeader(offset).encode())
        # Never committed: a young queue whose first message is still hot starts at 0 (Java's rule).
        min_offset = broker.store.get_min_offset_in_queue(header.topic, header.queue_id)
        if (
            header.set_zero_if_not_found is not False
            and min_offset <= 0
            and not broker.store.check_in_disk_by_consume_offset(header.topic, header.queue_id, 0)
        ):
            return request.response(ext_fields=OffsetResponseHeader(0).encode())
        return request.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    def update_consumer_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.decode(request.ext_fields)
        broker = self.broker
        # As 5.x: only a known group and topic, and (ours) only a queue the topic has, so commits cannot
        # grow the offset table without bound.
        if broker.groups.find(header.consumer_group) is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {header.consumer_group} not exist!"
            )
        tc = broker.topics.select(header.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {header.topic} not exist!")
        if not 0 <= header.queue_id < max(tc.read_queue_nums, tc.write_queue_nums):
            return request.response(
                ResponseCode.INVALID_PARAMETER, f"QueueId {header.queue_id} is invalid, topic is {header.topic}"
            )
        group, topic, queue_id = header.consumer_group, header.topic, header.queue_id
        if broker.offsets.query_offset(group, topic, queue_id) != header.commit_offset:
            # An admin's reset (mqadmin's fallback while the group is offline) also resets the group's pops.
            broker.pop.offset_reset(topic, group, queue_id)
        broker.offsets.commit_offset(group, topic, queue_id, header.commit_offset)
        return request.response(ResponseCode.SUCCESS)
