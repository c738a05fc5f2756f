"""QUERY_ASSIGNMENT (400), SET_MESSAGE_REQUEST_MODE (401) and GET_ALL_MESSAGE_REQUEST_MODE (402): the broker
allocates a topic's queues among a group's members for 5.x lite pull and POP consumers (Apache's
QueryAssignmentProcessor; the last is AdminBrokerProcessor's, a slave's sync source)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger

from gateway.client.rebalance import ALLOCATE_STRATEGIES, AllocateStrategy
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    MessageModel,
    MessageQueue,
    MessageQueueAssignment,
    MessageRequestMode,
    QueryAssignmentRequestBody,
    QueryAssignmentResponseBody,
    SetMessageRequestModeRequestBody,
)
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

log = Logger()


def allocate_for_pop(
    strategy: AllocateStrategy, client_id: str, mq_all: list[MessageQueue], cid_all: list[str], share: int
) -> list[MessageQueue]:
    """allocate4Pop: with ``share`` <= 0 or at least the other members, every member pops every queue (queue id
    -1); else each takes its own queues and those of the ``share`` members following it, or one queue each
    when there are more members than queues. Both lists sorted."""
    if share <= 0 or share >= len(cid_all) - 1:
        return [MessageQueue(mq.topic, mq.broker_name, -1) for mq in mq_all]
    if len(cid_all) <= len(mq_all):
        result = strategy(client_id, mq_all, cid_all)
        if client_id in cid_all:
            index = cid_all.index(client_id)
            for i in range(1, share + 1):
                result += strategy(cid_all[(index + i) % len(cid_all)], mq_all, cid_all)
        return result
    if client_id not in cid_all:
        return []
    return [mq_all[cid_all.index(client_id) % len(mq_all)]]


class QueryAssignmentProcessor:
    """Assignments from the group's members this broker knows and the topic's queues the NameServers route."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
            RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_message_request_mode,
            RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: self.get_all_message_request_mode,
        }

    def _mode(self, topic: str, group: str) -> SetMessageRequestModeRequestBody:
        mode = self.broker.request_modes.get(topic, group)
        if mode is not None:
            return mode
        cfg = self.broker.config
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a retry topic is always pulled
            return SetMessageRequestModeRequestBody(topic, group)
        default = MessageRequestMode[cfg.defaultMessageRequestMode]
        share = cfg.defaultPopShareQueueNum if default is MessageRequestMode.POP else 0
        return SetMessageRequestModeRequestBody(topic, group, default, share)

    def query_assignment(self, channel: RemotingProtocol, request: RemotingCommand) -> defer.Deferred[Any]:
        # Decoded before anything waits, so a bad body is answered as the dispatcher answers bad input.
        body = QueryAssignmentRequestBody.from_json(fastjson.loads(request.body))
        mode = self._mode(body.topic, body.consumer_group)

        def answer(queues: list[MessageQueue] | set[MessageQueue] | None) -> RemotingCommand:
            assignments = None
            if queues is not None:
                assignments = [MessageQueueAssignment(mq, mode.mode) for mq in sorted(set(queues))]
            return request.response(body=fastjson.dumps(QueryAssignmentResponseBody(assignments)))

        return self._load_balance(body, mode, channel).addCallback(answer)

    @defer.inlineCallbacks
    def _load_balance(
        self, body: QueryAssignmentRequestBody, mode: SetMessageRequestModeRequestBody, channel: RemotingProtocol
    ) -> Any:
        """doLoadBalance: the queues for this member; None means "keep what you have" (nothing known)."""
        broker, topic, group = self.broker, body.topic, body.consumer_group
        mq_set = yield broker.topic_route_info.topic_subscribe_info(topic)
        if not mq_set:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warn(
                    "QueryLoad: no assignment for group[{group}], the topic[{topic}] does not exist.",
                    group=group,
                    topic=topic,
                )
            return None
        if body.message_model is MessageModel.BROADCASTING or not broker.config.serverLoadBalancerEnable:
            return mq_set
        cg = broker.consumers.get(group)
        cid_all = sorted(cg.client_ids()) if cg is not None else []
        if not cid_all:
            log.warn(
                "QueryLoad: no assignment for group[{group}] topic[{topic}], get consumer id list failed",
                group=group,
                topic=topic,
            )
            return None
        strategy = ALLOCATE_STRATEGIES.get(body.strategy_name)
        if strategy is None:
            log.warn("QueryLoad: unsupported strategy [{name}],  {peer}", name=body.strategy_name, peer=channel.peer)
            return None
        if not body.client_id:
            return None  # Java's strategies refuse a blank currentCID
        mq_all = sorted(mq_set)
        if mode.mode is MessageRequestMode.POP:
            return allocate_for_pop(strategy, body.client_id, mq_all, cid_all, mode.pop_share_queue_num)
        return strategy(body.client_id, mq_all, cid_all)

    def set_message_request_mode(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        body = SetMessageRequestModeRequestBody.from_json(fastjson.loads(request.body))
        if body.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return request.response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        if self.broker.topics.select(body.topic) is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{body.topic}] not exist")
        if self.broker.groups.find(body.consumer_group) is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group does not exist")
        self.broker.request_modes.set(body)
        return request.response(ResponseCode.SUCCESS)

    def get_all_message_request_mode(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.broker.request_modes.encode())
