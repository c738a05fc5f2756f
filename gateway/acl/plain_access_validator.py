"""PlainAccessValidator: the broker's pre-request ACL hook — which resources a request needs, then the check.

Installed only when ``aclEnable=true`` (a broker without ACL runs no hook, and serves requests that
carry AccessKey/Signature like any other). A denial answers 1 (SYSTEM_ERROR) with Apache's remark;
a oneway request gets nothing, as in Java.

Resources per request code are Apache 4.9.8's (``%RETRY%group`` stands for a group), plus what 5.x
and common sense add: batch and reply sends need PUB like other sends, LITE_PULL_MESSAGE needs what
PULL_MESSAGE needs, and QUERY_CONSUMER_OFFSET what UPDATE_CONSUMER_OFFSET needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import HeartbeatData
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

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


def _send(topic_key: str, group_key: str) -> Callable[[RemotingCommand, Mapping[str, str]], Resources]:
    def needs(request: RemotingCommand, ext: Mapping[str, str]) -> Resources:
        out: Resources = {}
        topic = ext.get(topic_key)
        if is_retry_topic(topic):
            _add(out, retry_topic(ext.get(group_key)), SUB)
        else:
            _add(out, topic, PUB)
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


_PULL = _group("consumerGroup", "topic")
NEEDS: dict[int, Callable[[RemotingCommand, Mapping[str, str]], Resources]] = {
    RequestCode.SEND_MESSAGE: _send("topic", "group"),
    RequestCode.SEND_REPLY_MESSAGE: _send("topic", "group"),
    RequestCode.SEND_MESSAGE_V2: _send("b", "a"),
    RequestCode.SEND_BATCH_MESSAGE: _send("b", "a"),
    RequestCode.SEND_REPLY_MESSAGE_V2: _send("b", "a"),
    RequestCode.CONSUMER_SEND_MSG_BACK: _group("group"),
    RequestCode.PULL_MESSAGE: _PULL,
    RequestCode.LITE_PULL_MESSAGE: _PULL,
    RequestCode.QUERY_MESSAGE: _topic_sub,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _group("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group("consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _group("consumerGroup", "topic"),
    RequestCode.QUERY_CONSUMER_OFFSET: _group("consumerGroup", "topic"),
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

    def check(self, channel: RemotingProtocol, request: RemotingCommand) -> None:
        """Raise :class:`~gateway.acl.plain_permission_manager.AccessDenied` unless ``request`` may pass."""
        resources = self.needed_resources(request)
        self.manager.validate(channel.peer_host, request.code, request.ext_fields, request.body, resources)

    def hook(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | None:
        try:
            self.check(channel, request)
        except AccessDenied as e:
            log.warn("ACL denied code {code} from {peer}: {error}", code=request.code, peer=channel.peer, error=e)
            return request.response(ResponseCode.SYSTEM_ERROR, e.remark)
        return None
