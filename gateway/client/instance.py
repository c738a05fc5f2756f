"""ClientInstance (MQClientInstance): what the producers and consumers of one client share.

One remoting client, the topic routes learnt from the name servers (refreshed every 30 s), the broker
address table derived from them, heartbeats to every broker (every 30 s and when a producer or consumer
starts), offset persistence (every 5 s), rebalancing (every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED),
and UNREGISTER_CLIENT when a group leaves. The instance shuts itself down when its last group leaves.

Everything here runs in the reactor thread.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredList, maybeDeferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import ConsumerData, HeartbeatData, MessageQueue, ProducerData, TopicRouteData
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
    ResetOffsetRequestHeader,
)
from gateway.remoting.message import MessageConst, MessageExt, RecordError, decode_record

from .api import MQClientAPI
from .errors import MQClientError
from .message_id import local_ip
from .route import default_topic_route, subscribe_queues
from .security import ClientSecurity

log = Logger()

MASTER_ID = 0
# The group of the producer a push consumer sends retries with when the broker will not take them back.
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class MQProducerInner(Protocol):
    """What the instance needs from a producer."""

    group: str

    def publish_topics(self) -> Iterable[str]: ...

    def update_topic_publish_info(self, topic: str, route: TopicRouteData) -> None: ...

    def check_transaction_state(
        self, channel: Any, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None: ...


class MQConsumerInner(Protocol):
    """What the instance needs from a consumer."""

    group: str

    def consumer_data(self) -> ConsumerData: ...

    def update_topic_subscribe_info(self, topic: str, queues: set[MessageQueue]) -> None: ...

    def do_rebalance(self) -> Deferred[None] | None: ...

    def persist_consumer_offset(self) -> Deferred[Any]: ...


def split_namesrv_addr(namesrv_addr: str | Sequence[str]) -> list[str]:
    """``"host:port;host:port"`` (Java's format) or a list of addresses."""
    parts = namesrv_addr.split(";") if isinstance(namesrv_addr, str) else namesrv_addr
    return [a.strip() for a in parts if a.strip()]


class ClientInstance:
    """A client identity (``clientId`` = ``ip@instanceName``) and the state its groups share."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str],
        *,
        reactor: Any = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        api_timeout: float = 3.0,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        persist_consumer_offset_interval: float = 5.0,
        rebalance_interval: float = 20.0,
        security: ClientSecurity | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.reactor = reactor
        self.client_ip = client_ip or local_ip()
        # Java replaces the instance name "DEFAULT" by pid#nanoTime, which makes every instance distinct.
        self.instance_name = instance_name or f"{os.getpid()}#{time.monotonic_ns()}"
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        dispatcher = RequestDispatcher()
        dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._consumer_ids_changed)
        dispatcher.register(RequestCode.CHECK_TRANSACTION_STATE, self._check_transaction_state)
        dispatcher.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._get_consumer_running_info)
        dispatcher.register(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, self._get_consumer_status)
        dispatcher.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._reset_offset)
        dispatcher.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._consume_message_directly)
        self.remoting = RemotingClient(reactor, dispatcher)
        if security is not None:
            security.install(self.remoting)
        self.api = MQClientAPI(self.remoting, split_namesrv_addr(namesrv_addr), api_timeout)
        self.topic_routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producers: dict[str, MQProducerInner] = {}
        self.consumers: dict[str, MQConsumerInner] = {}
        self._periodic: list[tuple[float, Callable[[], Any]]] = [
            (poll_name_server_interval, self.update_topic_routes),
            (heartbeat_broker_interval, self.send_heartbeat_to_all_brokers),
            (persist_consumer_offset_interval, self.persist_all_consumer_offsets),
            (rebalance_interval, self.rebalance_immediately),
        ]
        self._loops: list[LoopingCall] = []

    def now(self) -> float:
        """Reactor time in seconds."""
        return self.reactor.seconds()

    # -- lifecycle

    @property
    def started(self) -> bool:
        return bool(self._loops)

    def start(self) -> None:
        """Start the periodic tasks (idempotent)."""
        if self.started:
            return
        for interval, fn in self._periodic:
            loop = LoopingCall(call_logged, fn)
            loop.clock = self.reactor
            loop.start(interval, now=False)
            self._loops.append(loop)

    def shutdown(self) -> Deferred[Any]:
        """Stop the periodic tasks and close every connection."""
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        return self.remoting.close()

    def register_producer(self, producer: MQProducerInner) -> None:
        if producer.group in self.producers:
            raise MQClientError(f"The producer group[{producer.group}] has been created before, specify another one")
        self.producers[producer.group] = producer
        self.start()

    def register_consumer(self, consumer: MQConsumerInner) -> None:
        if consumer.group in self.consumers:
            raise MQClientError(f"The consumer group[{consumer.group}] has been created before, specify another one")
        self.consumers[consumer.group] = consumer
        self.start()

    async def unregister_producer(self, group: str) -> None:
        """Tell the brokers the group left; shut down when no group is left."""
        self.producers.pop(group, None)
        await self._unregister_client(group, None)

    async def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)
        await self._unregister_client(None, group)

    async def _unregister_client(self, producer_group: str | None, consumer_group: str | None) -> None:
        calls = [
            Deferred.fromCoroutine(self.api.unregister_client(addr, self.client_id, producer_group, consumer_group))
            for addrs in self.broker_addrs.values()
            for addr in addrs.values()
        ]
        for ok, result in await DeferredList(calls, consumeErrors=True):
            if not ok:
                log.warn("unregister client failed: {error}", error=result.value)
        if not self.producers.keys() - {CLIENT_INNER_PRODUCER_GROUP} and not self.consumers:
            await self.shutdown()

    # -- routes

    async def update_topic_routes(self) -> None:
        """Refresh the route of every topic a producer or consumer uses."""
        topics = {t for p in self.producers.values() for t in p.publish_topics()}
        for c in self.consumers.values():
            topics.update(s.topic for s in c.consumer_data().subscription_data_set)
        for topic in sorted(topics):
            await self.update_topic_route_from_namesrv(topic)

    async def update_topic_route_from_namesrv(self, topic: str) -> bool:
        """Fetch the topic's route; False (and the old route kept) when the name servers have none."""
        try:
            route = await self.api.get_topic_route(topic)
        except Exception as e:
            log.warn("route of {topic} not fetched: {error}", topic=topic, error=e)
            return False
        if route is None:
            return False
        self._apply_route(topic, route)
        return True

    async def update_topic_route_from_default(self, topic: str, default_topic: str, queue_nums: int) -> bool:
        """Route ``topic`` like ``default_topic`` (TBW102) so a first send makes the broker create it."""
        try:
            template = await self.api.get_topic_route(default_topic)
        except Exception as e:
            log.warn("route of {topic} not fetched: {error}", topic=default_topic, error=e)
            return False
        if template is None:
            return False
        self._apply_route(topic, default_topic_route(template, queue_nums))
        return True

    def no_route_error(self, message: str) -> MQClientError:
        """``message`` (RocketMQ's words for a missing route), with the reason when no name server answered."""
        unreachable = self.api.namesrv_unreachable
        return MQClientError(message if unreachable is None else f"{message}, {unreachable}")

    def _apply_route(self, topic: str, route: TopicRouteData) -> None:
        self.topic_routes[topic] = route
        # Rebuilt from all routes, so brokers no route mentions any more drop out (cleanOfflineBroker).
        self.broker_addrs = {
            bd.broker_name: dict(bd.broker_addrs) for r in self.topic_routes.values() for bd in r.broker_datas
        }
        for p in self.producers.values():
            p.update_topic_publish_info(topic, route)
        queues = subscribe_queues(topic, route)
        for c in self.consumers.values():
            c.update_topic_subscribe_info(topic, queues)

    def find_broker_addr_in_publish(self, broker_name: str) -> str | None:
        """The master's address."""
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def find_broker_addr_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """Broker ``broker_id``'s address (the one a pull answer suggested), else the master's, else any
        slave's (findBrokerAddressInSubscribe)."""
        addrs = self.broker_addrs.get(broker_name)
        if addrs and broker_id in addrs:
            return addrs[broker_id]
        return _master_first(addrs)

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """A random broker of the topic, its master preferred."""
        route = self.topic_routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        return _master_first(random.choice(route.broker_datas).broker_addrs)

    async def find_broker_addr(self, mq: MessageQueue, broker_id: int = MASTER_ID) -> str:
        """The address serving ``mq`` (``broker_id``, else the master, else a slave), fetching the route once
        if unknown."""
        addr = self.find_broker_addr_in_subscribe(mq.broker_name, broker_id)
        if addr is None:
            await self.update_topic_route_from_namesrv(mq.topic)
            addr = self.find_broker_addr_in_subscribe(mq.broker_name, broker_id)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str] | None:
        """The group's client ids as one broker of the topic knows them; None when unavailable."""
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            await self.update_topic_route_from_namesrv(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return None
        try:
            return await self.api.get_consumer_id_list(addr, group)
        except Exception as e:
            log.warn("consumer list of {group} not fetched from {addr}: {error}", group=group, addr=addr, error=e)
            return None

    # -- heartbeats, rebalance, offsets

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(g) for g in self.producers],
            consumer_data_set=[c.consumer_data() for c in self.consumers.values()],
        )

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT to every master (and to slaves too when there are consumers)."""
        if not self.producers and not self.consumers:
            return
        data = self.heartbeat_data()
        calls = {
            addr: Deferred.fromCoroutine(self.api.send_heartbeat(addr, data))
            for addrs in self.broker_addrs.values()
            for broker_id, addr in addrs.items()
            if self.consumers or broker_id == MASTER_ID
        }
        for addr, (ok, result) in zip(calls, await DeferredList(list(calls.values()), consumeErrors=True), strict=True):
            if not ok:
                log.warn("heartbeat to {addr} failed: {error}", addr=addr, error=result.value)

    def rebalance_immediately(self) -> Deferred[Any]:
        """Rebalance every consumer now."""
        return DeferredList([call_logged(c.do_rebalance) for c in list(self.consumers.values())])

    def persist_all_consumer_offsets(self) -> Deferred[Any]:
        return DeferredList([c.persist_consumer_offset() for c in list(self.consumers.values())])

    def _consumer_ids_changed(self, channel: Any, request: RemotingCommand) -> None:
        group = ConsumerGroupRequestHeader.decode(request.ext_fields).consumer_group
        log.info("consumer ids of {group} changed, rebalancing", group=group)
        self.rebalance_immediately()

    def _check_transaction_state(self, channel: Any, request: RemotingCommand) -> None:
        """A broker asks how a half message's local transaction ended: its group's producer answers."""
        header = CheckTransactionStateRequestHeader.decode(request.ext_fields)
        try:
            msg = decode_record(request.body, decompress=True)
        except RecordError as e:
            log.warn("bad CHECK_TRANSACTION_STATE body from {peer}: {error}", peer=channel.peer, error=e)
            return
        group = msg.properties.get(MessageConst.PRODUCER_GROUP, "")
        producer = self.producers.get(group)
        if producer is None:
            log.warn("transaction check for group {group}, which has no producer here", group=group)
            return
        producer.check_transaction_state(channel, msg, header)

    def _push_consumer(self, group: str) -> Any:
        consumer = self.consumers.get(group)
        return consumer if hasattr(consumer, "running_info") else None

    @staticmethod
    def _no_group(request: RemotingCommand, group: str) -> RemotingCommand:
        return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer")

    def _get_consumer_running_info(self, channel: Any, request: RemotingCommand) -> Any:
        """mqadmin consumerStatus through the broker: this member's ConsumerRunningInfo (or a Deferred of it: a
        proxy asks its gRPC client first)."""
        group = GetConsumerRunningInfoRequestHeader.decode(request.ext_fields).consumer_group
        consumer = self._push_consumer(group)
        if consumer is None:
            return self._no_group(request, group)
        d = maybeDeferred(consumer.running_info)
        return d.addCallback(lambda info: request.response(body=fastjson.dumps(info)))

    def _consume_message_directly(self, channel: Any, request: RemotingCommand) -> Any:
        """A broker hands one message over for the group's listener (ConsumeMessageDirectlyResult)."""
        group = ConsumeMessageDirectlyResultRequestHeader.decode(request.ext_fields).consumer_group
        consumer = self._push_consumer(group)
        if consumer is None:
            return self._no_group(request, group)
        try:
            msg = decode_record(request.body, decompress=True)
        except RecordError as e:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad message: {e}")
        d = Deferred.fromCoroutine(consumer.consume_message_directly(msg))
        return d.addCallback(lambda result: request.response(body=fastjson.dumps(result)))

    def _get_consumer_status(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerStatusRequestHeader.decode(request.ext_fields)
        consumer = self._push_consumer(header.group)
        table = consumer.consumer_status(header.topic) if consumer is not None else {}
        return request.response(body=fastjson.dumps({"messageQueueTable": table}))

    def _reset_offset(self, channel: Any, request: RemotingCommand) -> None:
        """A broker moves this member's offsets (mqadmin resetOffsetByTime): a ResetOffsetBody map."""
        header = ResetOffsetRequestHeader.decode(request.ext_fields)
        consumer = self._push_consumer(header.group)
        if consumer is None:
            return
        try:
            raw = fastjson.loads(request.body).get("offsetTable") or {}
            offsets = {MessageQueue.from_json(dict(k)): int(v) for k, v in raw.items()}
        except (ValueError, TypeError, AttributeError) as e:
            log.warn("bad RESET_CONSUMER_CLIENT_OFFSET body from {peer}: {error}", peer=channel.peer, error=e)
            return
        log.info(
            "reset offsets of {group} on {topic}: {n} queue(s)", group=header.group, topic=header.topic, n=len(offsets)
        )
        call_logged(consumer.reset_offset, header.topic, offsets)


def _master_first(addrs: dict[int, str] | None) -> str | None:
    """The master's address, else the lowest-numbered slave's."""
    if not addrs:
        return None
    return addrs.get(MASTER_ID) or addrs[min(addrs)]


def call_logged(fn: Callable[..., Any], *args: Any) -> Deferred[Any]:
    """Run ``fn(*args)`` (sync or async); log a failure instead of propagating it, so callers keep going."""
    d = maybeDeferred(fn, *args)
    d.addErrback(lambda f: log.failure("client task failed", f))
    return d


def resolve_client(
    namesrv_addr: str | Sequence[str] | None,
    client: ClientInstance | None,
    reactor: Any,
    security: ClientSecurity | None = None,
) -> ClientInstance:
    """The given instance, else a new one for ``namesrv_addr`` (with ``security``: TLS, ACL signing)."""
    if client is not None:
        return client
    if not namesrv_addr:
        raise ValueError("give a name server address or a ClientInstance")
    return ClientInstance(namesrv_addr, reactor=reactor, security=security)
