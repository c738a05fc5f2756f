"""Telemetry: the long-lived bidirectional stream of each SDK client (ClientActivity.telemetry).

The client sends its settings first (and again when they change); the proxy registers its groups, keeps
the stream as the way back to the client, and answers with the settings merged with the server's side
(GrpcClientSettingsManager): the producer's retry policy and message limits, the consumer's batch size,
long-polling timeout and retry policy. Later the stream carries the server's commands (transaction
check-backs, verify-message and stack-trace requests) and the client's answers to them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.logger import Logger

from gateway.client.errors import MQClientError
from gateway.remoting.bodies import (
    CustomizedRetryPolicy,
    ExponentialRetryPolicy,
    GroupRetryPolicyType,
    SubscriptionGroupConfig,
)
from gateway.remoting.message import MessageExt

from .convert import ProxyError, build_message, duration, status, status_of
from .grpc import GrpcStatus, Kind, ServerCall
from .service import ProxyContext, Rpc
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb

if TYPE_CHECKING:
    from .service import MessagingService

log = Logger()

# What a group without a config of its own gets: 16 retries, the broker's delay levels 3 and up as the backoff.
DEFAULT_GROUP_CONFIG = SubscriptionGroupConfig("")
# What a verify-message answer's status means (buildConsumeMessageDirectlyResult).
VERIFY_RESULTS = {
    pb.Code.OK: "CR_SUCCESS",
    pb.Code.FAILED_TO_CONSUME_MESSAGE: "CR_LATER",
    pb.Code.MESSAGE_CORRUPTED: "CR_RETURN_NULL",
}
# A relayed request (verify message, stack trace) waits this long for the client's answer.
RELAY_TIMEOUT = 3.0
MAX_PENDING_RELAYS = 1024
# Settings of one stream waiting for their answer (each may wait for a broker): past this the client is flooding.
MAX_PENDING_SETTINGS = 16


def merge_subscription(settings: pb.Settings, group: SubscriptionGroupConfig, config: Any) -> None:
    """GrpcClientSettingsManager.mergeSubscriptionData: the proxy's batch size and long-polling timeout, FIFO
    from consumeMessageOrderly, retryMaxTimes + 1 attempts and the group's retry policy as the backoff."""
    subscription = settings.subscription
    subscription.receive_batch_size = config.grpcClientConsumerLongPollingBatchSize
    subscription.long_polling_timeout.CopyFrom(duration(config.grpcClientConsumerMaxLongPollingTimeoutMillis))
    subscription.fifo = group.consume_message_orderly
    backoff = settings.backoff_policy
    backoff.Clear()
    backoff.max_attempts = group.retry_max_times + 1
    policy = group.group_retry_policy
    if policy.type == GroupRetryPolicyType.EXPONENTIAL:
        exponential = policy.exponential_retry_policy or ExponentialRetryPolicy()
        backoff.exponential_backoff.initial.CopyFrom(duration(exponential.initial))
        backoff.exponential_backoff.max.CopyFrom(duration(exponential.max))
        backoff.exponential_backoff.multiplier = exponential.multiplier
    else:
        customized = policy.customized_retry_policy or CustomizedRetryPolicy()
        backoff.customized_backoff.next.extend(duration(ms) for ms in customized.next)


class TelemetryActivity:
    """Serves Telemetry; relays server-side requests to clients and matches their answers by nonce."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        self.pending: dict[str, Deferred[Any]] = {}

    def rpcs(self) -> list[Rpc]:
        return [Rpc("Telemetry", Kind.BIDI_STREAM, spb.TelemetryCommand, spb.TelemetryCommand, self.telemetry)]

    def telemetry(self, ctx: ProxyContext, call: ServerCall) -> None:
        # A settings answer waits for the group's config from a broker: answers leave in the order the settings
        # came, and a half-close ends the call after them.
        answers: Deferred[Any] = succeed(None)
        waiting = 0

        def settled(result: Any) -> Any:
            nonlocal waiting
            waiting -= 1
            return result

        def answer(settings: pb.Settings) -> None:
            if not call.finished:
                call.send(spb.TelemetryCommand(status=status(pb.Code.OK), settings=settings))

        def on_message(command: Any) -> None:
            nonlocal waiting
            if waiting >= MAX_PENDING_SETTINGS:
                call.finish(GrpcStatus.RESOURCE_EXHAUSTED, "too many settings waiting for their answer")
                return
            try:
                merged = self.on_command(ctx, call, command)
            except ProxyError as e:
                bad_request = pb.Code.BAD_REQUEST <= e.code < pb.Code.INTERNAL_ERROR
                grpc_status = GrpcStatus.INVALID_ARGUMENT if bad_request else GrpcStatus.INTERNAL
                call.finish(grpc_status, f"process client telemetryCommand failed. {e.message}")
                return
            if merged is not None:
                waiting += 1
                answers.addCallback(lambda _: merged)
                answers.addBoth(settled)
                answers.addCallback(answer)
                answers.addErrback(lambda f: log.failure("answering the settings of {id}", f, id=ctx.client_id))

        def closed(_: Any) -> None:
            client = self.service.clients.clients.get(ctx.client_id)
            if client is not None and client.telemetry is call:
                client.telemetry = None

        call.on_message = on_message
        call.on_half_close = lambda: answers.addCallback(lambda _: call.finish())
        call.closed.addCallback(closed)

    def on_command(self, ctx: ProxyContext, call: ServerCall, command: Any) -> Deferred[pb.Settings] | None:
        """Handles one command from the client; settings are answered with the merged settings (a Deferred)."""
        which = command.WhichOneof("command")
        if which == "settings":
            return self.on_settings(ctx, call, command.settings)
        if which == "thread_stack_trace":
            self._answered(command.thread_stack_trace.nonce, command)
        elif which == "verify_message_result":
            self._answered(command.verify_message_result.nonce, command)
        return None

    def on_settings(self, ctx: ProxyContext, call: ServerCall, settings: Any) -> Deferred[pb.Settings] | None:
        if settings.WhichOneof("pub_sub") is None:
            call.finish(GrpcStatus.INVALID_ARGUMENT, "there is no publishing or subscription data in settings")
            return None
        try:
            if not ctx.client_id.strip():
                raise ProxyError(pb.Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
            self.service.check_access(ctx, settings)
        except ProxyError as e:
            # Apache checks the client id and access in its request pipeline, before ClientActivity: a refusal is
            # a status-only TelemetryCommand on the open stream (the SDKs fail their startup on it), not its end.
            call.send(spb.TelemetryCommand(status=status_of(e)))
            return None
        client = self.service.clients.apply_settings(ctx, settings)
        client.telemetry = call
        return ensureDeferred(self.merged_settings(settings))

    async def merged_settings(self, settings: Any) -> pb.Settings:
        """The client's settings with the server's side filled in (getClientSettings): a consumer's from its
        group's config, read from a broker of its first subscribed topic."""
        config = self.service.config
        merged = pb.Settings()
        merged.CopyFrom(settings)
        if settings.WhichOneof("pub_sub") == "publishing":
            backoff = merged.backoff_policy
            backoff.Clear()
            backoff.max_attempts = config.grpcClientProducerMaxAttempts
            backoff.exponential_backoff.initial.CopyFrom(duration(config.grpcClientProducerBackoffInitialMillis))
            backoff.exponential_backoff.max.CopyFrom(duration(config.grpcClientProducerBackoffMaxMillis))
            backoff.exponential_backoff.multiplier = config.grpcClientProducerBackoffMultiplier
            merged.publishing.validate_message_type = config.enableTopicMessageTypeCheck
            merged.publishing.max_body_size = config.maxMessageSize
        else:
            subscription = merged.subscription
            group_config = None
            if subscription.subscriptions:
                group_config = await self.service.metadata.group_config_of_topic(
                    subscription.group.name, subscription.subscriptions[0].topic.name
                )
            merge_subscription(merged, group_config or DEFAULT_GROUP_CONFIG, config)
        merged.metric.Clear()
        merged.metric.on = False
        return merged

    # -- relays: a request written to a client, its answer matched by nonce

    def _member(self, group: str) -> Any:
        for client in self.service.clients.consumers_of(group):
            if client.telemetry is not None and not client.telemetry.finished:
                return client
        raise MQClientError(f"no gRPC client of {group} is connected")

    async def thread_stack_trace(self, group: str) -> dict[str, Any]:
        """A member's thread stacks as a ConsumerRunningInfo (PrintThreadStackTraceCommand)."""
        nonce = uuid.uuid4().hex
        command = spb.TelemetryCommand(
            status=status(pb.Code.OK), print_thread_stack_trace_command=spb.PrintThreadStackTraceCommand(nonce=nonce)
        )
        answer = await self.relay(self._member(group), nonce, command)
        if answer.status.code != pb.Code.OK:
            raise MQClientError(f"thread stack trace failed: {answer.status.message}")
        return {
            "jstack": answer.thread_stack_trace.thread_stack_trace,
            "mqTable": {},
            "properties": {},
            "statusTable": {},
            "subscriptionSet": [],
        }

    async def verify_message(self, group: str, msg: MessageExt) -> dict[str, Any]:
        """A member consumes ``msg`` once (VerifyMessageCommand): a ConsumeMessageDirectlyResult."""
        nonce = uuid.uuid4().hex
        command = spb.TelemetryCommand(
            status=status(pb.Code.OK),
            verify_message_command=spb.VerifyMessageCommand(
                nonce=nonce, message=build_message(msg, self.service.now_ms())
            ),
        )
        answer = await self.relay(self._member(group), nonce, command)
        return {
            "autoCommit": True,
            "consumeResult": VERIFY_RESULTS.get(answer.status.code),
            "order": False,
            "remark": "from gRPC client",
            "spentTimeMills": 0,
        }

    def relay(self, client: Any, nonce: str, command: Any) -> Deferred[Any]:
        """Write ``command`` to ``client``'s stream; fires with the client's answering TelemetryCommand, or fails
        with ProxyError after RELAY_TIMEOUT or when the client has no stream."""
        if len(self.pending) >= MAX_PENDING_RELAYS:
            raise ProxyError(pb.Code.TOO_MANY_REQUESTS, "too many requests waiting for clients")
        if not client.write(command):
            raise ProxyError(pb.Code.NOT_FOUND, f"client {client.client_id} has no telemetry stream")
        d: Deferred[Any] = Deferred()
        self.pending[nonce] = d
        d.addTimeout(RELAY_TIMEOUT, self.service.reactor)
        d.addBoth(self._forget, nonce)
        return d

    def _forget(self, result: Any, nonce: str) -> Any:
        self.pending.pop(nonce, None)
        return result

    def _answered(self, nonce: str, command: Any) -> None:
        d = self.pending.pop(nonce, None)
        if d is not None and not d.called:
            d.callback(command)
