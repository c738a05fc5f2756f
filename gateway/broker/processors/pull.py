"""PULL_MESSAGE (PullMessageProcessor): serve records from the store, hold empty pulls (long polling)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.filter import Expression, FilterError, compile_expression, is_tag_type
from gateway.remoting.bodies import MessageModel, SubscriptionData
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import PullMessageRequestHeader, PullMessageResponseHeader, PullSysFlag
from gateway.store.api import GetMessageStatus

from ..consumer_filter import filter_by_properties
from ..longpoll import PullRequest

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

# GetMessageStatus → response code, for statuses that do not depend on the requested offset.
_STATUS_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def tag_filter(sub: SubscriptionData | None) -> Callable[[int], bool] | None:
    """Broker-side TAG filter: ``*`` matches all, else the tag hash must be in the subscription's codeSet."""
    if sub is None or sub.sub_string == SubscriptionData.SUB_ALL or not is_tag_type(sub.expression_type):
        return None
    codes = frozenset(sub.code_set)
    return codes.__contains__


class PullMessageProcessor:
    """Answers pulls; an empty pull with the suspend flag waits in the hold service."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.PULL_MESSAGE: self.process, RequestCode.LITE_PULL_MESSAGE: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | None:
        return self.process_request(channel, request, broker_allow_suspend=True)

    def execute_held(self, held: PullRequest) -> None:
        """Re-run a held pull and write its answer (called by the hold service)."""
        channel, request = held.channel, held.request
        response = self.process_request(channel, request, broker_allow_suspend=False)
        if response is not None:
            self.broker.dispatcher.count_latency(request, response, held.since, long_polling=True)
            response.opaque = request.opaque
            channel.send_command(response)

    def process_request(
        self, channel: RemotingProtocol, request: RemotingCommand, broker_allow_suspend: bool
    ) -> RemotingCommand | None:
        broker = self.broker
        cfg = broker.config
        header = PullMessageRequestHeader.decode(request.ext_fields)
        if not cfg.brokerPermission & PermName.PERM_READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{cfg.brokerIP1}] pulling message is forbidden"
            )
        group_cfg = broker.groups.find(header.consumer_group)
        if group_cfg is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{header.consumer_group}] does not exist, http://rocketmq.apache.org/docs/faq/",
            )
        if not group_cfg.consume_enable:
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {header.consumer_group}"
            )
        has_suspend = bool(header.sys_flag & PullSysFlag.SUSPEND)
        has_commit = bool(header.sys_flag & PullSysFlag.COMMIT_OFFSET)
        has_subscription = bool(header.sys_flag & PullSysFlag.SUBSCRIPTION)
        tc = broker.topics.select(header.topic)
        if tc is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{header.topic}] not exist, apply first please! http://rocketmq.apache.org/docs/faq/",
            )
        if not tc.perm & PermName.PERM_READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling message is forbidden"
            )
        if header.queue_id < 0 or header.queue_id >= tc.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{channel.peer}]",
            )
        # SQL92 (or another non-TAG type): units all pass the consume-queue check, records are then
        # matched on their properties by this compiled expression.
        expression: Expression | None = None
        if has_subscription:
            sub = SubscriptionData.build(header.topic, header.subscription, header.expression_type)
            sub.sub_version = header.sub_version
            if not is_tag_type(sub.expression_type):
                try:
                    expression = compile_expression(sub.expression_type, header.subscription)
                except FilterError:
                    return request.response(
                        ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
                    )
        else:
            cg = broker.consumers.get(header.consumer_group)
            if cg is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    "the consumer's group info not exist http://rocketmq.apache.org/docs/faq/",
                )
            if cg.message_model == MessageModel.BROADCASTING and not group_cfg.consume_broadcast_enable:
                return request.response(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{header.consumer_group}] can not consume by broadcast way",
                )
            sub = cg.find_subscription(header.topic)
            if sub is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    "the consumer's subscription not exist http://rocketmq.apache.org/docs/faq/",
                )
            if sub.sub_version < header.sub_version:
                return request.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            if not is_tag_type(sub.expression_type):
                filter_data = broker.consumer_filters.get(header.topic, header.consumer_group)
                if filter_data is None:
                    return request.response(
                        ResponseCode.FILTER_DATA_NOT_EXIST,
                        "The broker's consumer filter data is not exist!Your expression may be wrong!",
                    )
                if filter_data.client_version < header.sub_version:
                    return request.response(
                        ResponseCode.FILTER_DATA_NOT_LATEST, "the consumer's consumer filter data not latest"
                    )
                expression = filter_data.compiled
        if expression is not None and not cfg.enablePropertyFilter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}",
            )
        msg_filter = tag_filter(sub)
        result = broker.store.get_message(
            header.consumer_group, header.topic, header.queue_id, header.queue_offset, header.max_msg_nums, msg_filter
        )
        if result is None:  # the store is shutting down
            return request.response(ResponseCode.SYSTEM_ERROR, "store getMessage return null")
        if expression is not None:
            filter_by_properties(result, expression)
        status = result.status
        if status == GetMessageStatus.NO_MESSAGE_IN_QUEUE:
            code = ResponseCode.PULL_OFFSET_MOVED if header.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _STATUS_CODES[status]
        suggest = 0
        if cfg.slaveReadEnable and result.suggest_pull_from_slave:
            suggest = group_cfg.which_broker_when_consume_slowly
        elif cfg.slaveReadEnable:
            suggest = group_cfg.broker_id
        if code == ResponseCode.PULL_OFFSET_MOVED and cfg.is_slave and not broker.store_config.offsetCheckInSlave:
            # As 4.9.8: a slave may only be behind, so it does not correct the consumer's offset; it sends it
            # to the group's broker to try again.
            code, suggest = ResponseCode.PULL_RETRY_IMMEDIATELY, group_cfg.broker_id
        ext = PullMessageResponseHeader(
            suggest_which_broker_id=suggest,
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        ).encode()
        response: RemotingCommand | None
        if code == ResponseCode.SUCCESS:
            response = request.response(code, _remark(status), ext)  # "FOUND", as Apache says it
            response.body_tail = list(result.buffers)
            broker.message_counts.pulled(
                header.topic,
                header.consumer_group,
                header.queue_id,
                result.message_count,
                result.buffer_total_size,
                result.next_begin_offset,
            )
        elif code == ResponseCode.PULL_NOT_FOUND and broker_allow_suspend and has_suspend:
            timeout = header.suspend_timeout_millis if cfg.longPollingEnable else cfg.shortPollingTimeMills
            broker.hold_service.suspend(
                header.topic,
                header.queue_id,
                PullRequest(channel, request, header.queue_offset, msg_filter),
                timeout,
            )
            response = None
        else:
            response = request.response(code, _remark(status), ext)
        if broker_allow_suspend and has_commit and not cfg.is_slave:
            broker.offsets.commit_offset(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        return response


def _remark(status: GetMessageStatus) -> str:
    return status.name
