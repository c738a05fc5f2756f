"""The MessagingService of ``apache.rocketmq.v2``, in "cluster mode": every call becomes remoting requests to the
NameServer and the brokers through one :class:`~gateway.client.instance.ClientInstance`.

Each family of RPCs lives in a module of its own (route, client, telemetry, producer, consumer) as an
*activity*: an object whose ``rpcs()`` lists the RPCs it serves. This module turns them into the gRPC
method table, with what every call shares: the client's identity from the metadata (:class:`ProxyContext`),
the access check, and failures answered as a response whose status carries a RocketMQ ``Code`` (as
Apache's proxy answers them), never as a broken call. RPCs no activity serves answer gRPC UNIMPLEMENTED.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet.defer import DeferredList, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.client.errors import REMOTING_ERRORS, MQBrokerError, MQClientError
from gateway.client.instance import ClientInstance
from gateway.remoting.errors import NameServerUnreachable
from gateway.remoting.rpc_latency import RPC_LATENCY_BUCKETS_MS, Histograms

from .config import ProxyConfig
from .convert import ProxyError, status_of
from .grpc import GrpcCallError, GrpcServerFactory, Kind, Method, ServerCall
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb

log = Logger()

SERVICE_PATH = "/apache.rocketmq.v2.MessagingService/"
# Activities beside the core ones, imported when present (the consumer RPCs are a module of their own).
OPTIONAL_ACTIVITIES = ("gateway.proxy.consumer", "gateway.proxy.offsets")


@dataclass(slots=True)
class ProxyContext:
    """Who is calling: what the SDKs put in every call's metadata (x-mq-*) and the peer address."""

    client_id: str
    language: str
    client_version: str
    namespace: str
    remote_address: str
    metadata: dict[str, str] = field(repr=False)

    @classmethod
    def of(cls, call: ServerCall) -> ProxyContext:
        md = call.metadata
        return cls(
            client_id=md.get("x-mq-client-id", ""),
            language=md.get("x-mq-language", ""),
            client_version=md.get("x-mq-client-version", ""),
            namespace=md.get("x-mq-namespace", ""),
            remote_address=call.peer,
            metadata=md,
        )


@dataclass(frozen=True, slots=True)
class Rpc:
    """An RPC an activity serves. ``handler(ctx, request)`` for unary calls (returns the response or a Deferred
    of it), ``handler(ctx, request, call)`` for server streams, ``handler(ctx, call)`` for a bidirectional stream.
    ``response_type`` answers a failure with its status (unary and server streams)."""

    name: str
    kind: Kind
    request_type: Any
    response_type: Any
    handler: Callable[..., Any]

    @classmethod
    def of(cls, name: str, kind: Kind, handler: Callable[..., Any]) -> Rpc:
        """An RPC whose messages are service.proto's ``<name>Request`` and ``<name>Response``."""
        return cls(name, kind, getattr(spb, f"{name}Request"), getattr(spb, f"{name}Response"), handler)


class Activity(Protocol):
    def rpcs(self) -> list[Rpc]: ...


class Authenticator(Protocol):
    def check(self, ctx: ProxyContext, request: Any) -> None:
        """Raise ProxyError(UNAUTHORIZED / FORBIDDEN) when the caller may not make ``request``."""


class MessagingService:
    """The proxy: its configuration, its remoting client and its activities."""

    def __init__(
        self,
        config: ProxyConfig,
        instance: ClientInstance,
        reactor: Any,
        authenticator: Authenticator | None = None,
        rpc_latency: Histograms | None = None,
    ) -> None:
        from .client import ClientManager
        from .metadata import MetadataService
        from .producer import ProducerActivity, TransactionTable
        from .route import RouteActivity
        from .telemetry import TelemetryActivity

        self.config = config
        self.instance = instance
        self.reactor = reactor
        self.authenticator = authenticator
        self.transactions = TransactionTable(reactor)
        self.metadata = MetadataService(self)
        self.clients = ClientManager(self)
        self.producer = ProducerActivity(self)
        self.telemetry = TelemetryActivity(self)
        self.activities: list[Activity] = [RouteActivity(self), self.clients, self.telemetry, self.producer]
        # (rpc, response code, long polling, result) → latency in ms, for rocketmq_rpc_latency{protocol_type=grpc_v2}
        # (the broker's, when the proxy runs beside one).
        self.rpc_latency = rpc_latency if rpc_latency is not None else Histograms(RPC_LATENCY_BUCKETS_MS)
        for name in OPTIONAL_ACTIVITIES:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name != name:
                    raise
                continue
            self.activities.append(module.activity(self))

    def start(self) -> None:
        self.instance.start()
        for activity in self.activities:
            if hasattr(activity, "start"):
                activity.start()

    def stop(self) -> Any:
        """Stop the activities (what they still send to brokers goes first), then the remoting client."""
        stopping = [maybeDeferred(activity.stop) for activity in self.activities if hasattr(activity, "stop")]
        return DeferredList(stopping, consumeErrors=True).addCallback(lambda _: self.instance.shutdown())

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    async def master_of(self, broker_name: str, topic: str) -> str | None:
        """The address of ``broker_name``'s master, reading ``topic``'s route once when it is not known."""
        addr = self.instance.find_broker_addr_in_publish(broker_name)
        if addr is None and await self.instance.update_topic_route_from_namesrv(topic):
            addr = self.instance.find_broker_addr_in_publish(broker_name)
        return addr

    # -- the gRPC method table

    def factory(self) -> GrpcServerFactory:
        """A listening factory serving every RPC of every activity."""
        methods = {}
        for activity in self.activities:
            for rpc in activity.rpcs():
                methods[SERVICE_PATH + rpc.name] = self._method(rpc)
        return GrpcServerFactory(methods)

    def _method(self, rpc: Rpc) -> Method:
        request_code = _snake_case(rpc.name)
        if rpc.kind is Kind.UNARY:

            def unary(call: ServerCall, request: Any) -> Any:
                started = time.perf_counter()
                d = maybeDeferred(self._enter, call, request, rpc.handler)
                d.addErrback(self._error_response, rpc)
                return d.addBoth(self._count_latency, call, request_code, started)

            return Method(Kind.UNARY, rpc.request_type, unary)
        if rpc.kind is Kind.SERVER_STREAM:

            def server_stream(call: ServerCall, request: Any) -> Any:
                started = time.perf_counter()
                d = maybeDeferred(self._enter, call, request, rpc.handler, call)

                def failed(failure: Failure) -> Any:
                    response = self._error_response(failure, rpc)
                    if not call.finished:
                        call.send(response)
                        call.finish()
                    return response

                d.addErrback(failed)
                return d.addBoth(self._count_latency, call, request_code, started, True)

            return Method(Kind.SERVER_STREAM, rpc.request_type, server_stream)

        def bidi(call: ServerCall) -> Any:
            return rpc.handler(ProxyContext.of(call), call)

        return Method(Kind.BIDI_STREAM, rpc.request_type, bidi)

    def _count_latency(
        self, result: Any, call: ServerCall, request_code: str, started: float, long_polling: bool = False
    ) -> Any:
        """rocketmq_rpc_latency of a unary call or server stream, under Apache's labels with protocol_type
        grpc_v2: the RPC as request_code, the answer's RocketMQ Code (or the gRPC status it failed with) as
        response_code. A server stream's handler answers on the stream: what it returns counts as success."""
        if isinstance(result, Failure):
            error = result.value
            status = error.status.name if isinstance(error, GrpcCallError) else "UNKNOWN"
            key = (request_code, status.lower(), long_polling, "process_request_failed")
        else:
            code = result.status.code if result is not None and hasattr(result, "status") else pb.Code.OK
            outcome = "cancelled" if call.cancelled else "success"
            key = (request_code, pb.Code.Name(code).lower(), long_polling, outcome)
        self.rpc_latency.record(key, (time.perf_counter() - started) * 1000)
        return None if long_polling else result

    def _enter(self, call: ServerCall, request: Any, handler: Callable[..., Any], *extra: Any) -> Any:
        ctx = self.context(call)
        self.check_access(ctx, request)
        return handler(ctx, request, *extra)

    def context(self, call: ServerCall) -> ProxyContext:
        """The caller's context; a call without a client id is refused (GrpcValidator.validateContext)."""
        ctx = ProxyContext.of(call)
        if not ctx.client_id.strip():
            raise ProxyError(pb.Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
        return ctx

    def check_access(self, ctx: ProxyContext, request: Any) -> None:
        if self.authenticator is not None:
            self.authenticator.check(ctx, request)

    @staticmethod
    def _error_response(failure: Failure, rpc: Rpc) -> Any:
        if failure.check(GrpcCallError):
            return failure
        error = failure.value
        if isinstance(error, (MQBrokerError, MQClientError, NameServerUnreachable, *REMOTING_ERRORS)):
            log.warn("{rpc} failed: {error}", rpc=rpc.name, error=error)
        elif not isinstance(error, ProxyError):
            log.failure("{rpc} failed", failure, rpc=rpc.name)
        return rpc.response_type(status=status_of(error))


def _snake_case(name: str) -> str:
    """``ReceiveMessage`` → ``receive_message``, as RocketMQ's request code names read."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
