"""What the POP family's processors check before they read (Apache 5.3.3's processors each repeat these checks,
with the same remarks): the request's born time, the topic, the queue and the consumer group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import PermName, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.store.commit_log import now_ms

if TYPE_CHECKING:
    from gateway.remoting.bodies import TopicConfig
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController


def with_born_time(request: RemotingCommand) -> dict[str, Any]:
    """The request's ext fields with ``bornTime`` set to now when absent or "0" (addExtFieldIfNotExist)."""
    ext = request.ext_fields = request.ext_fields if request.ext_fields is not None else {}
    if ext.get("bornTime") in (None, "0"):
        ext["bornTime"] = str(now_ms())
    return ext


def check_readable(
    broker: BrokerController, channel: RemotingProtocol, request: RemotingCommand, topic: str, queue_id: int, group: str
) -> TopicConfig | RemotingCommand:
    """The topic's config, or the answer Apache's peek, notification and polling-info processors give when the
    broker or topic is not readable, the queue does not exist or the group may not consume."""
    cfg = broker.config
    if not cfg.brokerPermission & PermName.PERM_READ:
        return request.response(ResponseCode.NO_PERMISSION, f"the broker[{cfg.brokerIP1}] peeking message is forbidden")
    return check_topic_and_group(broker, channel, request, topic, queue_id, group)


def check_topic_and_group(
    broker: BrokerController, channel: RemotingProtocol, request: RemotingCommand, topic: str, queue_id: int, group: str
) -> TopicConfig | RemotingCommand:
    """The topic's config, or the answer of a pop, peek or notification whose topic is not readable, whose queue
    does not exist or whose group may not consume (each processor checks the broker's permission itself first)."""
    tc = broker.topics.select(topic)
    if tc is None:
        return request.response(
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! http://rocketmq.apache.org/docs/faq/",
        )
    if not tc.perm & PermName.PERM_READ:
        return request.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
    if queue_id >= tc.read_queue_nums:
        return request.response(
            ResponseCode.INVALID_PARAMETER,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}] "
            f"consumer:[{channel.peer}]",
        )
    group_cfg = broker.groups.find(group)
    if group_cfg is None:
        return request.response(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group [{group}] does not exist, http://rocketmq.apache.org/docs/faq/",
        )
    if not group_cfg.consume_enable:
        return request.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    return tc


def check_topic_queue(
    broker: BrokerController, channel: RemotingProtocol, request: RemotingCommand, topic: str, queue_id: int
) -> TopicConfig | RemotingCommand:
    """The topic's config, or the answer Apache gives an ack or invisible-time change of an unknown topic or
    queue."""
    tc = broker.topics.select(topic)
    if tc is None:
        return request.response(
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! http://rocketmq.apache.org/docs/faq/",
        )
    if queue_id >= tc.read_queue_nums or queue_id < 0:
        return request.response(
            ResponseCode.MESSAGE_ILLEGAL,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}] "
            f"consumer:[{channel.peer}]",
        )
    return tc
