"""The gRPC clients the proxy knows (ClientActivity, GrpcChannelManager, GrpcClientSettingsManager).

A client is known by the ``x-mq-client-id`` of its calls. Its Telemetry stream brings its settings and is
the only way back to it (transaction check-backs, verify-message and stack-trace requests). Its groups are
registered with the brokers as groups of the proxy's own remoting client, as Apache's proxy does in
cluster mode: a producer's group is the topic it publishes to (Apache's choice, so that a broker's
transaction check of a topic reaches any producer of that topic), a consumer's group is its own.

A client neither calling nor holding a Telemetry stream for ``channelExpiredTimeout`` is forgotten, so the
tables stay bounded by the clients alive.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.remoting.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from gateway.remoting.message import MessageExt

from .convert import ProxyError, status
from .grpc import Kind, ServerCall
from .producer import ProxyProducer
from .service import ProxyContext, Rpc
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb
from .validate import validate_consumer_group, validate_topic

if TYPE_CHECKING:
    from .service import MessagingService

log = Logger()

EXPIRY_SCAN_INTERVAL = 10.0
NO_SETTINGS = "cannot find client settings for this client"


@dataclass(slots=True)
class GrpcClient:
    """One SDK client: its settings, its Telemetry stream (if open) and when it was last heard of."""

    client_id: str
    language: str = ""
    remote_address: str = ""
    settings: pb.Settings | None = None
    telemetry: ServerCall | None = None
    last_seen: float = 0.0
    producer_groups: set[str] = field(default_factory=set)
    consumer_group: str | None = None

    def write(self, command: Any) -> bool:
        """Send a TelemetryCommand on the client's stream; False when it has none open."""
        if self.telemetry is None or self.telemetry.finished:
            return False
        self.telemetry.send(command)
        return True


class ProxyConsumer:
    """A consumer group registered with the brokers for its SDK clients (what a consumer heartbeat carries).

    A broker's requests to the group's member (mqadmin consumerStatus, consumeMessage) are relayed to one of the
    group's SDK clients over its Telemetry stream (PrintThreadStackTraceCommand, VerifyMessageCommand).
    """

    def __init__(
        self, service: MessagingService, group: str, consume_type: ConsumeType, subscriptions: list[SubscriptionData]
    ) -> None:
        self.service = service
        self.group = group
        self.consume_type = consume_type
        self.subscriptions = subscriptions

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=self.consume_type,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subscription_data_set=list(self.subscriptions),
        )

    def update_topic_subscribe_info(self, topic: str, queues: set[MessageQueue]) -> None:
        pass  # the brokers hand out messages (POP): no queues to hold here

    def do_rebalance(self) -> None:
        pass  # likewise

    def persist_consumer_offset(self) -> Deferred[Any]:
        return succeed(None)  # the brokers keep POP consumers' offsets

    def running_info(self) -> Deferred[dict[str, Any]]:
        """ConsumerRunningInfo with a member's thread stacks (what Apache's proxy answers)."""
        return Deferred.fromCoroutine(self.service.telemetry.thread_stack_trace(self.group))

    async def consume_message_directly(self, msg: MessageExt) -> dict[str, Any]:
        return await self.service.telemetry.verify_message(self.group, msg)

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        return {}  # no client-side offsets

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        log.info("offset reset of {group} ignored: the brokers keep its offsets", group=self.group)


def subscription_data(entry: pb.SubscriptionEntry) -> SubscriptionData:
    """A SubscriptionEntry as the brokers know subscriptions; ILLEGAL_FILTER_EXPRESSION when it does not parse."""
    expression_type = "SQL92" if entry.expression.type == pb.FilterType.SQL else "TAG"
    try:
        return SubscriptionData.build(entry.topic.name, entry.expression.expression, expression_type)
    except Exception:
        raise ProxyError(pb.Code.ILLEGAL_FILTER_EXPRESSION, "expression format is not correct") from None


def consume_type(client_type: int) -> ConsumeType:
    if client_type == pb.ClientType.SIMPLE_CONSUMER:
        return ConsumeType.CONSUME_ACTIVELY
    return ConsumeType.CONSUME_PASSIVELY


class ClientManager:
    """Known clients and the groups registered for them; serves Heartbeat and NotifyClientTermination."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        self.clients: dict[str, GrpcClient] = {}
        self.producers: dict[str, ProxyProducer] = {}
        self.consumers: dict[str, ProxyConsumer] = {}
        self._expiry = LoopingCall(self.expire)
        self._expiry.clock = service.reactor

    def rpcs(self) -> list[Rpc]:
        return [
            Rpc.of("Heartbeat", Kind.UNARY, self.heartbeat),
            Rpc.of("NotifyClientTermination", Kind.UNARY, self.notify_client_termination),
        ]

    def start(self) -> None:
        self._expiry.start(EXPIRY_SCAN_INTERVAL, now=False)

    def stop(self) -> None:
        if self._expiry.running:
            self._expiry.stop()

    # -- the table

    def touch(self, ctx: ProxyContext) -> GrpcClient:
        """The caller's record, created on first sight, marked alive now."""
        client = self.clients.get(ctx.client_id)
        if client is None:
            client = self.clients[ctx.client_id] = GrpcClient(ctx.client_id, ctx.language, ctx.remote_address)
        client.last_seen = self.service.reactor.seconds()
        return client

    def expire(self) -> None:
        """Forget clients silent for channelExpiredTimeout and without a Telemetry stream."""
        deadline = self.service.reactor.seconds() - self.service.config.channelExpiredTimeout / 1000
        for client in list(self.clients.values()):
            if client.last_seen < deadline and (client.telemetry is None or client.telemetry.finished):
                log.info("gRPC client {id} expired", id=client.client_id)
                self.remove(client.client_id)

    def remove(self, client_id: str) -> GrpcClient | None:
        client = self.clients.pop(client_id, None)
        if client is not None:
            self._release_groups(client)
        return client

    def _release_groups(self, client: GrpcClient) -> None:
        # A group nobody uses any more leaves the heartbeats; the brokers forget it after their own expiry.
        for group in client.producer_groups:
            if not any(group in c.producer_groups for c in self.clients.values()):
                producer = self.producers.pop(group, None)
                if producer is not None:
                    self.service.instance.producers.pop(group, None)
        group = client.consumer_group
        in_use = any(c.consumer_group == group for c in self.clients.values())
        if group is not None and not in_use and self.consumers.pop(group, None) is not None:
            self.service.instance.consumers.pop(group, None)

    def consumes_as(self, client_id: str, group: str) -> bool:
        """Whether the client is known and consumes as ``group`` (ConsumerManager.findChannel)."""
        client = self.clients.get(client_id)
        return client is not None and client.consumer_group == group

    def members(self, producer_group: str) -> Iterable[GrpcClient]:
        return (c for c in self.clients.values() if producer_group in c.producer_groups)

    def consumers_of(self, group: str) -> Iterable[GrpcClient]:
        return (c for c in self.clients.values() if c.consumer_group == group)

    # -- groups

    def register_producer(self, client: GrpcClient, topic: str) -> None:
        """Publish on ``topic``: its producer group (named after the topic) heartbeats the brokers."""
        client.producer_groups.add(topic)
        if topic in self.producers:
            return
        producer = self.producers[topic] = ProxyProducer(topic, self.service)
        self.service.instance.register_producer(producer)
        self._announce(topic)

    def register_consumer(self, client: GrpcClient, settings: pb.Settings) -> None:
        """Consume as ``settings.subscription.group``: the group (its latest subscriptions) heartbeats the brokers."""
        group = validate_consumer_group(settings.subscription.group)
        client.consumer_group = group
        subscriptions = [subscription_data(e) for e in settings.subscription.subscriptions]
        consumer = self.consumers.get(group)
        if consumer is not None:
            consumer.subscriptions = subscriptions
            consumer.consume_type = consume_type(settings.client_type)
            return
        consumer = ProxyConsumer(self.service, group, consume_type(settings.client_type), subscriptions)
        self.consumers[group] = consumer
        self.service.instance.register_consumer(consumer)
        for sub in subscriptions:
            self._announce(sub.topic)

    def _announce(self, topic: str) -> None:
        """Learn the topic's brokers and heartbeat them now, not at the next round."""

        async def announce() -> None:
            await self.service.instance.update_topic_route_from_namesrv(topic)
            await self.service.instance.send_heartbeat_to_all_brokers()

        Deferred.fromCoroutine(announce()).addErrback(lambda f: log.failure("heartbeat for {t} failed", f, t=topic))

    def apply_settings(self, ctx: ProxyContext, settings: pb.Settings) -> GrpcClient:
        """Settings from Telemetry: register the client's groups, keep the settings."""
        client = self.touch(ctx)
        which = settings.WhichOneof("pub_sub")
        if which == "publishing":
            for topic in settings.publishing.topics:
                self.register_producer(client, validate_topic(topic))
        elif which == "subscription":
            self.register_consumer(client, settings)
        client.settings = settings
        return client

    # -- RPCs

    def heartbeat(self, ctx: ProxyContext, request: Any) -> spb.HeartbeatResponse:
        client = self.touch(ctx)
        settings = client.settings
        if settings is None:
            return spb.HeartbeatResponse(status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE, NO_SETTINGS))
        if settings.client_type == pb.ClientType.PRODUCER:
            for topic in settings.publishing.topics:
                self.register_producer(client, topic.name)
        elif settings.client_type in (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER):
            validate_consumer_group(request.group)
            self.register_consumer(client, settings)
        else:
            return spb.HeartbeatResponse(
                status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(settings.client_type))
            )
        return spb.HeartbeatResponse(status=status(pb.Code.OK))

    def notify_client_termination(self, ctx: ProxyContext, request: Any) -> spb.NotifyClientTerminationResponse:
        client = self.clients.get(ctx.client_id)
        if client is None or client.settings is None:
            return spb.NotifyClientTerminationResponse(status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE, NO_SETTINGS))
        client_type = client.settings.client_type
        if client_type in (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER):
            validate_consumer_group(request.group)
        elif client_type != pb.ClientType.PRODUCER:
            return spb.NotifyClientTerminationResponse(
                status=status(pb.Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(client_type))
            )
        self.remove(ctx.client_id)
        return spb.NotifyClientTerminationResponse(status=status(pb.Code.OK))
