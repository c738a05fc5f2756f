"""PlainAccessValidator: the broker's pre-request ACL hook — which resources a request needs, then the check.

Installed only when ``aclEnable=true`` (a broker without ACL runs no hook, and serves requests that
carry AccessKey/Signature like any other). A denial answers 1 (SYSTEM_ERROR) with Apache's remark;
a oneway request gets nothing, as in Java.

Resources per request code are Apache 4.9.8's (``%RETRY%group`` stands for a group), plus what 5.x
and common sense add: batch and reply sends need PUB like other sends, LITE_PULL_MESSAGE needs what
PULL_MESSAGE needs, QUERY_CONSUMER_OFFSET what UPDATE_CONSUMER_OFFSET needs, and 5.x's pops, acks,
invisible-time changes, peeks, notifications and polling-info requests SUB on their groups and topics (what
5.x's @RocketMQAction asks of them). Stricter
than 4.9.8 where it leaks: a send to ``%RETRY%G`` needs SUB on group G itself (4.9.8 checks the group the sender
names), and VIEW_MESSAGE_BY_ID and CONSUMER_SEND_MSG_BACK need SUB on the stored message's topics
(:meth:`PlainAccessValidator.refuse_message`, called by their processors once the message is read).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import BatchAckMessageRequestBody, HeartbeatData
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import parse_normal_topic
from gateway.remoting.message import MessageConst, MessageExt

from .permission import PUB, SUB, is_retry_topic, retry_topic
from .plain_permission_manager import AccessDenied, PlainPermissionManager

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

log = Logger()

_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"

Resources = dict[str, int]


def _add(resources: Resources, resource: str | None, perm: int) -> None:
    if resource is not None:
        resources[resource] = perm


def _send(topic_key: str) -> Callable[[RemotingCommand, Mapping[str, str]], Resources]:
    def needs(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
        out: Resources = {}
        topic = ext.get(topic_key)
        # A retry topic is its group's resource: SUB on that group, whatever group the sender names.
        _add(out, topic, SUB if is_retry_topic(topic) else PUB)
        return out

    return needs


def _group(group_key: str, topic_key: str | None = None) -> Callable[[RemotingCommand, Mapping[str, str]], Resources]:
    def needs(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
        out: Resources = {}
        _add(out, retry_topic(ext.get(group_key)), SUB)
        if topic_key is not None:
            _add(out, ext.get(topic_key), SUB)
        return out

    return needs


def _topic_sub(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
    out: Resources = {}
    _add(out, ext.get("topic"), SUB)
    return out


def _heartbeat(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
    try:
        heartbeat = HeartbeatData.from_json(fastjson.loads(request.body))
    except (ValueError, TypeError, AttributeError) as e:
        raise AccessDenied(str(e), _PARSE) from None
    out: Resources = {}
    for consumer in heartbeat.consumer_data_set:
        _add(out, retry_topic(consumer.group_name), SUB)
        for subscription in consumer.subscription_data_set:
            _add(out, subscription.topic, SUB)
    return out


def _pop(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
    # 5.x POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME: SUB on the group and the topic (an ack names
    # the group's pop retry topic for a message popped from it: that stands for the topic).
    out: Resources = {}
    group = ext.get("consumerGroup")
    _add(out, retry_topic(group), SUB)
    topic = ext.get("topic")
    _add(out, parse_normal_topic(topic, group) if topic is not None and group is not None else topic, SUB)
    return out


def _batch_ack(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
    try:
        body = BatchAckMessageRequestBody.from_json(fastjson.loads(request.body))
    except (ValueError, TypeError, AttributeError) as e:
        raise AccessDenied(str(e), _PARSE) from None
    out: Resources = {}
    for ack in body.acks:
        out.update(_pop(request, {"consumerGroup": ack.consumer_group, "topic": ack.topic}))
    return out


_PULL = _group("consumerGroup", "topic")
NEEDS: dict[int, Callable[[RemotingCommand, Mapping[str, str]], Resources]] = {
    RequestCode.SEND_MESSAGE: _send("topic"),
    RequestCode.SEND_REPLY_MESSAGE: _send("topic"),
    RequestCode.SEND_MESSAGE_V2: _send("b"),
    RequestCode.SEND_BATCH_MESSAGE: _send("b"),
    RequestCode.SEND_REPLY_MESSAGE_V2: _send("b"),
    RequestCode.CONSUMER_SEND_MSG_BACK: _group("group"),
    RequestCode.PULL_MESSAGE: _PULL,
    RequestCode.LITE_PULL_MESSAGE: _PULL,
    RequestCode.QUERY_MESSAGE: _topic_sub,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _group("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group("consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _group("consumerGroup", "topic"),
    RequestCode.QUERY_CONSUMER_OFFSET: _group("consumerGroup", "topic"),
    RequestCode.POP_MESSAGE: _pop,
    RequestCode.ACK_MESSAGE: _pop,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _pop,
    RequestCode.BATCH_ACK_MESSAGE: _batch_ack,
    RequestCode.PEEK_MESSAGE: _pop,
    RequestCode.NOTIFICATION: _pop,
    RequestCode.POLLING_INFO: _pop,
    RequestCode.RECALL_MESSAGE: _send("topic"),  # 5.3: PUB on the topic, as a send
}

_NOTHING: Resources = {}


class PlainAccessValidator:
    """``hook`` is a :class:`~gateway.remoting.dispatch.RequestDispatcher` hook."""

    def __init__(self, manager: PlainPermissionManager) -> None:
        self.manager = manager

    @staticmethod
    def needed_resources(request: RemotingCommand) -> Resources:
        """What ``request`` needs, resource -> PUB/SUB (PlainAccessValidator.parse)."""
        ext = request.ext_fields
        needs = NEEDS.get(request.code)
        if needs is None or ext is None:
            return _NOTHING
        return needs(request, ext)

    def refuse(
        self,
        channel: RemotingProtocol,
        request: RemotingCommand,
        resources: Mapping[str, int],
        needs_admin: bool | None = None,
    ) -> RemotingCommand | None:
        """The denial to answer unless ``request`` may use ``resources`` (and, if ``needs_admin``, comes from an
        admin; None: as the request code says); None when it may."""
        try:
            self.manager.validate(
                channel.peer_host, request.code, request.ext_fields, request.body, resources, needs_admin
            )
        except AccessDenied as e:
            log.warn("ACL denied code {code} from {peer}: {error}", code=request.code, peer=channel.peer, error=e)
            return request.response(ResponseCode.SYSTEM_ERROR, e.remark)
        return None

    def refuse_message(
        self, channel: RemotingProtocol, request: RemotingCommand, msg: MessageExt
    ) -> RemotingCommand | None:
        """As :meth:`refuse`, for a request that reads or copies the stored ``msg``: SUB on its topic and,
        for a retried or dead message, on the topic it was first sent to."""
        resources = {msg.topic: SUB}
        _add(resources, msg.properties.get(MessageConst.RETRY_TOPIC), SUB)
        return self.refuse(channel, request, resources)

    def hook(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | None:
        return self.refuse(channel, request, self.needed_resources(request))
