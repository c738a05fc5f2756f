"""Queue-level queries every client offers (MQAdmin) and a small admin helper: routes, topic creation."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import deferLater

from gateway.remoting.bodies import MessageQueue, TopicRouteData
from gateway.remoting.codes import PermName
from gateway.remoting.headers import CreateTopicRequestHeader, QueryMessageRequestHeader
from gateway.remoting.names import TRACE_TOPIC
from gateway.trace.view import TraceView, trace_views

from .errors import MQClientError
from .instance import MASTER_ID, ClientInstance, resolve_client
from .producer import DEFAULT_TOPIC
from .route import subscribe_queues
from .security import ClientSecurity


class MQAdmin:
    """Offsets by queue and the readable queues of a topic, for anything holding a ``client``."""

    client: ClientInstance

    def fetch_subscribe_message_queues(self, topic: str) -> Deferred[list[MessageQueue]]:
        """The topic's readable queues, sorted, from a fresh route."""

        async def fetch() -> list[MessageQueue]:
            if not await self.client.update_topic_route_from_namesrv(topic):
                raise self.client.no_route_error(f"Can not find Message Queue for this topic, {topic}")
            return sorted(subscribe_queues(topic, self.client.topic_routes[topic]))

        return Deferred.fromCoroutine(fetch())

    def max_offset(self, mq: MessageQueue) -> Deferred[int]:
        """The offset the next message of the queue will get."""
        return self._on_broker(mq, lambda api, addr: api.get_max_offset(addr, mq.topic, mq.queue_id))

    def min_offset(self, mq: MessageQueue) -> Deferred[int]:
        """The queue's oldest offset still stored."""
        return self._on_broker(mq, lambda api, addr: api.get_min_offset(addr, mq.topic, mq.queue_id))

    def search_offset(self, mq: MessageQueue, timestamp: int) -> Deferred[int]:
        """The offset of the message stored nearest to ``timestamp`` (ms)."""
        return self._on_broker(mq, lambda api, addr: api.search_offset(addr, mq.topic, mq.queue_id, timestamp))

    def earliest_msg_store_time(self, mq: MessageQueue) -> Deferred[int]:
        """Store time (ms) of the queue's oldest message."""
        return self._on_broker(mq, lambda api, addr: api.get_earliest_msg_storetime(addr, mq.topic, mq.queue_id))

    def _on_broker(self, mq: MessageQueue, call: Any) -> Deferred[int]:
        async def run() -> int:
            return await call(self.client.api, await self.client.find_broker_addr(mq))

        return Deferred.fromCoroutine(run())


def _routes_to(route: TopicRouteData | None, masters: Sequence[str]) -> bool:
    """Whether there is a ``route`` and it names each of ``masters`` (a route lists the brokers with queues)."""
    return route is not None and set(masters) <= {d.master_addr() for d in route.broker_datas}


class Admin(MQAdmin):
    """Routes and topic creation, for tools and tests. ``shutdown()`` when done."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        client: ClientInstance | None = None,
        reactor: Any = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self._owns_client = client is None
        self.client = resolve_client(namesrv_addr, client, reactor, security)

    def get_route(self, topic: str) -> Deferred[TopicRouteData]:
        """The topic's route from the name servers."""

        async def fetch() -> TopicRouteData:
            route = await self.client.api.get_topic_route(topic)
            if route is None:
                raise MQClientError(f"No topic route info in name server for the topic: {topic}")
            return route

        return Deferred.fromCoroutine(fetch())

    def create_topic(
        self,
        topic: str,
        queue_nums: int = 4,
        *,
        broker_addr: str | None = None,
        perm: int = PermName.PERM_READ | PermName.PERM_WRITE,
        order: bool = False,
        route_timeout: float = 10.0,
    ) -> Deferred[None]:
        """UPDATE_AND_CREATE_TOPIC on ``broker_addr``, or on every master TBW102 routes to (MQAdminImpl.createTopic);
        fires once the name servers route the topic, to each of those masters (the brokers register it
        asynchronously: a producer that read the route before would send to the first broker only)."""

        async def create() -> None:
            addrs = [broker_addr] if broker_addr else await self._master_addrs(DEFAULT_TOPIC)
            header = CreateTopicRequestHeader(
                topic=topic,
                default_topic=DEFAULT_TOPIC,
                read_queue_nums=queue_nums,
                write_queue_nums=queue_nums,
                perm=perm,
                topic_filter_type="SINGLE_TAG",
                topic_sys_flag=0,
                order=order,
            )
            for addr in addrs:
                await self.client.api.create_topic(addr, header)
            # The masters TBW102's route gave, spelt as the route spells them (a given broker_addr may not be).
            masters = [] if broker_addr else addrs
            deadline = self.client.now() + route_timeout
            while not _routes_to(await self.client.api.get_topic_route(topic), masters):
                if self.client.now() > deadline:
                    raise MQClientError(f"topic {topic} not routed by the name servers after {route_timeout}s")
                await deferLater(self.client.reactor, 0.05, lambda: None)

        return Deferred.fromCoroutine(create())

    def query_msg_trace_by_id(self, msg_id: str, trace_topic: str = TRACE_TOPIC) -> Deferred[list[TraceView]]:
        """mqadmin queryMsgTraceById: the Pub and consume rows of ``msg_id`` in the trace topic, looked up by
        key on every broker that hosts it; :func:`gateway.trace.view.format_trace_views` prints them."""

        async def query() -> list[TraceView]:
            route = await self.get_route(trace_topic)
            header = QueryMessageRequestHeader(trace_topic, msg_id, 64, 0, int(time.time() * 1000))
            found = []
            for bd in route.broker_datas:
                addr = bd.broker_addrs.get(MASTER_ID) or next(iter(bd.broker_addrs.values()), None)
                if addr is not None:
                    found.extend(await self.client.api.query_message_by_key(addr, header))
            return trace_views(found, msg_id)

        return Deferred.fromCoroutine(query())

    async def _master_addrs(self, topic: str) -> list[str]:
        route = await self.get_route(topic)
        return [bd.broker_addrs[MASTER_ID] for bd in route.broker_datas if MASTER_ID in bd.broker_addrs]

    def shutdown(self) -> Deferred[Any]:
        """Close the connections of the client instance this helper made (a shared one is left alone)."""
        return self.client.shutdown() if self._owns_client else succeed(None)
