"""QueryRoute (RouteActivity): a topic's queues as the NameServer knows them, every broker reached through us.

In cluster mode Apache's proxy answers with its own endpoint for every broker (the addresses the client
used, on the proxy's gRPC port), so all later calls come back here. Queues are numbered read-only first,
then write-only, then read-write, then inaccessible, as Apache numbers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.remoting.bodies import QueueData, TopicRouteData
from gateway.remoting.codes import PermName

from .convert import ProxyError, resource, status
from .grpc import Kind
from .service import ProxyContext, Rpc
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb
from .validate import validate_topic

if TYPE_CHECKING:
    from .service import MessagingService

# Our broker keeps no message type per topic (Apache's topic attribute message.type), so every topic takes
# every type, as an Apache topic of type MIXED does.
ACCEPTED_MESSAGE_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


def permission(perm: int) -> int:
    readable, writable = bool(perm & PermName.PERM_READ), bool(perm & PermName.PERM_WRITE)
    if readable and writable:
        return pb.Permission.READ_WRITE
    if readable:
        return pb.Permission.READ
    if writable:
        return pb.Permission.WRITE
    return pb.Permission.NONE


def queues_of(qd: QueueData) -> list[int]:
    """The permission of each queue id of a broker's queue data (genMessageQueueFromQueueData)."""
    readable, writable = bool(qd.perm & PermName.PERM_READ), bool(qd.perm & PermName.PERM_WRITE)
    r = w = rw = n = 0
    if readable and writable:
        rw = min(qd.write_queue_nums, qd.read_queue_nums)
        r, w = qd.read_queue_nums - rw, qd.write_queue_nums - rw
    elif writable:
        w = qd.write_queue_nums
    elif readable:
        r = qd.read_queue_nums
    else:
        n = max(1, qd.write_queue_nums, qd.read_queue_nums)
    return (
        [pb.Permission.READ] * r
        + [pb.Permission.WRITE] * w
        + [pb.Permission.READ_WRITE] * rw
        + [pb.Permission.NONE] * n
    )


def proxy_endpoints(requested: pb.Endpoints, port: int) -> pb.Endpoints:
    """The addresses the client asked through, on our port (useEndpointPortFromRequest=false)."""
    scheme = requested.scheme or pb.AddressScheme.IPv4
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=a.host, port=port) for a in requested.addresses])


class RouteActivity:
    """QueryRoute; QueryAssignment is the consumer module's."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    def rpcs(self) -> list[Rpc]:
        return [Rpc.of("QueryRoute", Kind.UNARY, self.query_route)]

    async def route(self, topic: str) -> TopicRouteData:
        """The topic's route from the NameServer; TOPIC_NOT_FOUND when it has none."""
        route = await self.service.instance.api.get_topic_route(topic)
        if route is None:
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"No topic route info in name server for the topic: {topic}")
        return route

    def brokers(self, route: TopicRouteData, endpoints: pb.Endpoints) -> dict[str, dict[int, pb.Broker]]:
        """Broker name -> broker id -> Broker, every one at the proxy's endpoints."""
        ours = proxy_endpoints(endpoints, self.service.config.grpcServerPort)
        return {
            bd.broker_name: {
                bid: pb.Broker(name=bd.broker_name, id=bid, endpoints=ours) for bid in sorted(bd.broker_addrs)
            }
            for bd in route.broker_datas
        }

    async def query_route(self, ctx: ProxyContext, request: Any) -> spb.QueryRouteResponse:
        topic = validate_topic(request.topic)
        route = await self.route(topic)
        brokers = self.brokers(route, request.endpoints)
        queues = []
        for qd in route.queue_datas:
            by_id = brokers.get(qd.broker_name)
            if by_id is None:
                break  # as Apache: a queue data without its broker data ends the list
            for broker in by_id.values():
                for qid, perm in enumerate(queues_of(qd)):
                    queues.append(
                        pb.MessageQueue(
                            topic=resource(topic),
                            id=qid,
                            permission=perm,
                            broker=broker,
                            accept_message_types=ACCEPTED_MESSAGE_TYPES,
                        )
                    )
        return spb.QueryRouteResponse(status=status(pb.Code.OK), message_queues=queues)
