"""HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG (ClientManageProcessor)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.filter import FilterError, compile_expression, is_tag_type
from gateway.remoting import fastjson
from gateway.remoting.bodies import CheckClientRequestBody, HeartbeatData
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import UnregisterClientRequestHeader

from ..clients import ClientChannelInfo
from ..managers import retry_topic

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

log = Logger()


class ClientManageProcessor:
    """Registers producers and consumers (with their subscriptions) from heartbeats."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
        }

    def heart_beat(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        broker = self.broker
        data = HeartbeatData.from_json(fastjson.loads(request.body) if request.body else {})
        topics_version = broker.topics.data_version.counter
        # The work per group is constant (new groups and retry topics only ask for a coalesced write and
        # registration), so a heartbeat listing many groups costs in proportion to its size.
        info = ClientChannelInfo(channel, data.client_id, request.language, request.version)
        for consumer in data.consumer_data_set:
            group_cfg = broker.groups.find(consumer.group_name)
            notify = True
            if group_cfg is not None:
                notify = group_cfg.notify_consumer_ids_changed_enable
                if group_cfg.retry_queue_nums > 0:
                    broker.topics.create_topic_in_send_message_back_method(
                        retry_topic(consumer.group_name),
                        group_cfg.retry_queue_nums,
                        PermName.PERM_READ | PermName.PERM_WRITE,
                    )
            broker.consumers.register_consumer(
                consumer.group_name,
                info,
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                consumer.subscription_data_set,
                notify and broker.config.notifyConsumerIdsChangedEnable,
            )
            # A bad SQL92 expression is only logged here, as in Apache: the heartbeat still succeeds, and its
            # pulls answer FILTER_DATA_NOT_EXIST. Clients find out at start from CHECK_CLIENT_CONFIG.
            broker.consumer_filters.register(consumer.group_name, consumer.subscription_data_set)
        for producer in data.producer_data_set:
            broker.producers.register_producer(producer.group_name, info)
        return broker.answer_once_registered(topics_version, request.response(ResponseCode.SUCCESS))

    def unregister_client(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = UnregisterClientRequestHeader.decode(request.ext_fields)
        if header.producer_group:
            broker.producers.unregister_producer(header.producer_group, channel)
        if header.consumer_group:
            group_cfg = broker.groups.table.get(header.consumer_group)
            notify = group_cfg.notify_consumer_ids_changed_enable if group_cfg else True
            broker.consumers.unregister_consumer(header.consumer_group, channel, notify)
        return request.response(ResponseCode.SUCCESS)

    def check_client_config(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """A consumer about to start asks whether its subscription's expression works here."""
        body = CheckClientRequestBody.from_json(fastjson.loads(request.body) if request.body else {})
        sub = body.subscription_data
        if sub is None:
            return request.response(ResponseCode.SUCCESS)
        if is_tag_type(sub.expression_type):
            return request.response(ResponseCode.SUCCESS)
        if not self.broker.config.enablePropertyFilter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}",
            )
        try:
            compile_expression(sub.expression_type, sub.sub_string)
        except FilterError as e:
            log.warn(
                "Client {client}@{group} filter message, but failed to compile expression! sub={sub}, error={error}",
                client=body.client_id,
                group=body.group,
                sub=sub.sub_string,
                error=e,
            )
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
        return request.response(ResponseCode.SUCCESS)
