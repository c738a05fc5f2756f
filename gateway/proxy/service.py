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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet.defer import maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.client.errors import MQBrokerError, MQClientError
from gateway.client.instance import ClientInstance

from .config import ProxyConfig
from .convert import ProxyError, status_of
from .grpc import GrpcCallError, GrpcServerFactory, Kind, Method, ServerCall
from .v2 import definition_pb2 as pb

log = Logger()

SERVICE_PATH = "/apache.rocketmq.v2.MessagingService/"
# Activities beside the core ones, imported when present (the consumer RPCs are a module of their own).
OPTIONAL_ACTIVITIES = ("gateway.proxy.consumer",)


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
    ) -> None:
        from .client import ClientManager
        from .producer import ProducerActivity, TransactionTable
        from .route import RouteActivity
        from .telemetry import TelemetryActivity

        self.config = config
        self.instance = instance
        self.reactor = reactor
        self.authenticator = authenticator
        self.transactions = TransactionTable(reactor)
        self.clients = ClientManager(self)
        self.producer = ProducerActivity(self)
        self.activities: list[Activity] = [RouteActivity(self), self.clients, TelemetryActivity(self), self.producer]
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
        self.clients.start()

    def stop(self) -> Any:
        self.clients.stop()
        return self.instance.shutdown()

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    # -- the gRPC method table

    def factory(self) -> GrpcServerFactory:
        """A listening factory serving every RPC of every activity."""
        methods = {}
        for activity in self.activities:
            for rpc in activity.rpcs():
                methods[SERVICE_PATH + rpc.name] = self._method(rpc)
        return GrpcServerFactory(methods)

    def _method(self, rpc: Rpc) -> Method:
        if rpc.kind is Kind.UNARY:

            def unary(call: ServerCall, request: Any) -> Any:
                d = maybeDeferred(self._enter, call, request, rpc.handler)
                return d.addErrback(self._error_response, rpc)

            return Method(Kind.UNARY, rpc.request_type, unary)
        if rpc.kind is Kind.SERVER_STREAM:

            def server_stream(call: ServerCall, request: Any) -> Any:
                d = maybeDeferred(self._enter, call, request, rpc.handler, call)

                def failed(failure: Failure) -> None:
                    if not call.finished:
                        call.send(self._error_response(failure, rpc))
                        call.finish()

                return d.addErrback(failed)

            return Method(Kind.SERVER_STREAM, rpc.request_type, server_stream)

        def bidi(call: ServerCall) -> Any:
            return rpc.handler(ProxyContext.of(call), call)

        return Method(Kind.BIDI_STREAM, rpc.request_type, bidi)

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
        if not isinstance(error, ProxyError | MQBrokerError | MQClientError):
            log.failure("{rpc} failed", failure, rpc=rpc.name)
        return rpc.response_type(status=status_of(error))
