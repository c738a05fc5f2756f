"""The MessagingService's answers as Apache's proxy gives them, against a NameServer, Broker and proxy in this
process, called with grpcio (in a thread) as the SDKs call it."""

from __future__ import annotations

import itertools
import queue
import shutil
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_twisted
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from gateway.__main__ import GatewayService
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.client import Admin, Producer, build_message
from gateway.namesrv.service import NamesrvController
from gateway.proxy.producer import consistent_hash
from gateway.proxy.server import broker_proxy
from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import ConsumeMessageDirectlyResultRequestHeader, GetConsumerRunningInfoRequestHeader
from tests.client.conftest import sleep
from tests.namesrv.conftest import loopback_namesrv_config

_names = itertools.count()
SERVICE = "/apache.rocketmq.v2.MessagingService/"


@dataclass
class Proxy:
    addr: str
    port: int
    admin: Admin
    channel: grpc.Channel
    broker_addr: str

    def call(self, method: str, request: Any, response_type: Any, client_id: str | None = "test-client") -> Any:
        """A unary call as the SDKs make it (in a thread: grpcio blocks)."""
        fn = self.channel.unary_unary(SERVICE + method, type(request).SerializeToString, response_type.FromString)
        metadata = [("x-mq-client-id", client_id)] if client_id else []
        return deferToThread(fn, request, timeout=5, metadata=metadata)

    async def topic(self, queues: int = 4) -> str:
        name = f"ProxyTopic{next(_names)}"
        await self.admin.create_topic(name, queues)
        return name


@pytest_twisted.async_yield_fixture(scope="module")
async def proxy(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Proxy]:
    root: Path = tmp_path_factory.mktemp("proxy")
    broker_cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-a",
            "listenPort": "0",
            "grpcServerPort": "0",
            "storePathRootDir": str(root / "store"),
        },
    )
    grpc_server = broker_proxy(broker_cfg, reactor, None)
    service = GatewayService(
        NamesrvController(loopback_namesrv_config(root), reactor),
        BrokerController(broker_cfg, store_cfg, reactor),
        grpc_server,
    )
    service.startService()
    admin = Admin(broker_cfg.namesrvAddr)
    for _ in range(250):
        if await admin.client.api.get_topic_route("TBW102") is not None:
            break
        await sleep(0.02)
    port = grpc_server.listen_port
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield Proxy(f"127.0.0.1:{port}", port, admin, channel, broker_cfg.broker_addr)
    channel.close()
    await admin.shutdown()
    await service.stopService()
    shutil.rmtree(root / "store")  # its commitlog reserves 1 GB of disk until the run ends


def route_request(topic: str, port: int = 1) -> spb.QueryRouteRequest:
    endpoints = pb.Endpoints(scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)])
    return spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints)


@pytest_twisted.ensureDeferred
async def test_query_route_points_every_queue_at_the_proxy(proxy: Proxy) -> None:
    topic = await proxy.topic(queues=3)
    response = await proxy.call("QueryRoute", route_request(topic), spb.QueryRouteResponse)
    assert response.status.code == pb.Code.OK and response.status.message == "OK"
    assert [q.id for q in response.message_queues] == [0, 1, 2]
    for q in response.message_queues:
        assert q.permission == pb.Permission.READ_WRITE and q.topic.name == topic
        assert q.broker.name == "broker-a" and q.broker.id == 0
        # The client's host, on the proxy's own port (whatever port the client named).
        assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("127.0.0.1", proxy.port)]
        assert set(q.accept_message_types) == {
            pb.MessageType.NORMAL,
            pb.MessageType.FIFO,
            pb.MessageType.DELAY,
            pb.MessageType.TRANSACTION,
        }


@pytest_twisted.ensureDeferred
async def test_route_errors(proxy: Proxy) -> None:
    missing = await proxy.call("QueryRoute", route_request("NoSuchTopicHere"), spb.QueryRouteResponse)
    assert missing.status.code == pb.Code.TOPIC_NOT_FOUND and not missing.message_queues
    illegal = await proxy.call("QueryRoute", route_request("bad topic!"), spb.QueryRouteResponse)
    assert illegal.status.code == pb.Code.ILLEGAL_TOPIC
    system = await proxy.call("QueryRoute", route_request("RMQ_SYS_TRANS_HALF_TOPIC"), spb.QueryRouteResponse)
    assert system.status == pb.Status(code=pb.Code.ILLEGAL_TOPIC, message="cannot access system topic")
    anonymous = await proxy.call("QueryRoute", route_request("TBW102"), spb.QueryRouteResponse, client_id=None)
    assert anonymous.status == pb.Status(code=pb.Code.CLIENT_ID_REQUIRED, message="client id cannot be empty")


@pytest_twisted.ensureDeferred
async def test_heartbeat_needs_settings_first(proxy: Proxy) -> None:
    response = await proxy.call("Heartbeat", spb.HeartbeatRequest(), spb.HeartbeatResponse, client_id="never-synced")
    assert response.status == pb.Status(
        code=pb.Code.UNRECOGNIZED_CLIENT_TYPE, message="cannot find client settings for this client"
    )


def message(topic: str, **system: Any) -> pb.Message:
    sp = pb.SystemProperties(message_id=system.pop("message_id", f"ID{next(_names)}"), **system)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=b"body")


@pytest_twisted.ensureDeferred
async def test_send_refusals(proxy: Proxy) -> None:
    topic = await proxy.topic()

    async def send(*messages: pb.Message) -> pb.Status:
        response = await proxy.call("SendMessage", spb.SendMessageRequest(messages=messages), spb.SendMessageResponse)
        return response.status

    assert (await send()).code == pb.Code.MESSAGE_CORRUPTED
    empty = message(topic)
    empty.body = b""
    assert await send(empty) == pb.Status(code=pb.Code.MESSAGE_BODY_EMPTY, message="message body cannot be empty")
    reserved = message(topic)
    reserved.user_properties["UNIQ_KEY"] = "x"
    assert await send(reserved) == pb.Status(
        code=pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, message="property is used by system: UNIQ_KEY"
    )
    assert (await send(message(topic, message_id=""))).code == pb.Code.ILLEGAL_MESSAGE_ID
    assert (await send(message(topic, tag="a|b"))).code == pb.Code.ILLEGAL_MESSAGE_TAG
    assert (await send(message(topic, message_group=" "))).code == pb.Code.ILLEGAL_MESSAGE_GROUP
    far = message(topic)
    far.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 2 * 86_400_000)
    assert (await send(far)).code == pb.Code.ILLEGAL_DELIVERY_TIME
    assert (await send(message(topic), message("OtherTopic"))).code == pb.Code.MESSAGE_CORRUPTED
    # The proxy creates no topic (no TBW102 fallback as a 4.x producer has).
    assert (await send(message("NoSuchTopicToSend"))).code == pb.Code.TOPIC_NOT_FOUND


@pytest_twisted.ensureDeferred
async def test_send_answers_the_message_id(proxy: Proxy) -> None:
    topic = await proxy.topic()
    msg = message(topic, message_id="01ABCDEF", tag="T")
    response = await proxy.call("SendMessage", spb.SendMessageRequest(messages=[msg]), spb.SendMessageResponse)
    assert response.status.code == pb.Code.OK
    [entry] = response.entries
    assert entry.status.code == pb.Code.OK and entry.message_id == "01ABCDEF" and entry.offset == 0


@pytest_twisted.ensureDeferred
async def test_end_transaction_of_an_unknown_half_message(proxy: Proxy) -> None:
    topic = await proxy.topic()
    request = spb.EndTransactionRequest(
        topic=pb.Resource(name=topic), message_id="X", transaction_id="nope", resolution=pb.TransactionResolution.COMMIT
    )
    response = await proxy.call("EndTransaction", request, spb.EndTransactionResponse)
    assert response.status == pb.Status(code=pb.Code.INVALID_TRANSACTION_ID, message="cannot found transaction data")


@pytest_twisted.ensureDeferred
async def test_telemetry_settings_answered_with_the_server_side(proxy: Proxy) -> None:
    topic = await proxy.topic()
    settings = pb.Settings(
        client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)])
    )
    fn = proxy.channel.stream_stream(
        SERVICE + "Telemetry", spb.TelemetryCommand.SerializeToString, spb.TelemetryCommand.FromString
    )

    def sync() -> spb.TelemetryCommand:
        stream = fn(iter([spb.TelemetryCommand(settings=settings)]), timeout=5, metadata=[("x-mq-client-id", "tc")])
        return next(stream)

    answer = await deferToThread(sync)
    assert answer.status.code == pb.Code.OK
    merged = answer.settings
    assert merged.backoff_policy.max_attempts == 3
    assert merged.backoff_policy.exponential_backoff.initial.ToMilliseconds() == 10
    assert merged.backoff_policy.exponential_backoff.max.ToMilliseconds() == 1000
    assert merged.publishing.validate_message_type and merged.publishing.max_body_size == 4 * 1024 * 1024
    assert not merged.metric.on
    # Now the heartbeat knows the client.
    heartbeat = await proxy.call("Heartbeat", spb.HeartbeatRequest(), spb.HeartbeatResponse, client_id="tc")
    assert heartbeat.status.code == pb.Code.OK


async def consumer_settings(proxy: Proxy, group: str, topic: str, client_id: str) -> pb.Settings:
    """The settings a push consumer of ``group`` is answered on its Telemetry stream."""
    settings = pb.Settings(
        client_type=pb.ClientType.PUSH_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic), expression=pb.FilterExpression())],
        ),
    )
    fn = proxy.channel.stream_stream(
        SERVICE + "Telemetry", spb.TelemetryCommand.SerializeToString, spb.TelemetryCommand.FromString
    )

    def sync() -> spb.TelemetryCommand:
        stream = fn(
            iter([spb.TelemetryCommand(settings=settings)]), timeout=5, metadata=[("x-mq-client-id", client_id)]
        )
        return next(stream)

    answer = await deferToThread(sync)
    assert answer.status.code == pb.Code.OK
    return answer.settings


@pytest_twisted.ensureDeferred
async def test_telemetry_without_a_client_id_is_answered_on_the_open_stream(proxy: Proxy) -> None:
    """As Apache's request pipeline: a status-only TelemetryCommand (the SDKs fail their startup on it), where
    ending the stream would have them open it again forever."""
    settings = pb.Settings(client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
    fn = proxy.channel.stream_stream(
        SERVICE + "Telemetry", spb.TelemetryCommand.SerializeToString, spb.TelemetryCommand.FromString
    )

    def first_answer() -> spb.TelemetryCommand:
        stream = fn(iter([spb.TelemetryCommand(settings=settings)]), timeout=5)
        answer = next(stream)
        stream.cancel()
        return answer

    answer = await deferToThread(first_answer)
    assert answer.status == pb.Status(code=pb.Code.CLIENT_ID_REQUIRED, message="client id cannot be empty")


@pytest_twisted.ensureDeferred
async def test_consumer_settings_and_assignment_follow_the_group_config(proxy: Proxy) -> None:
    topic = await proxy.topic(queues=3)
    fifo_group, plain_group = f"ProxyFifo{next(_names)}", f"ProxyPlain{next(_names)}"
    policy = {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 2000, "max": 60000, "multiplier": 3}}
    body = {"groupName": fifo_group, "consumeMessageOrderly": True, "retryMaxTimes": 4, "groupRetryPolicy": policy}
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumps(body))
    assert (await proxy.admin.client.remoting.invoke(proxy.broker_addr, request, 5)).code == ResponseCode.SUCCESS

    merged = await consumer_settings(proxy, fifo_group, topic, "fifo-client")
    assert merged.subscription.fifo
    assert merged.backoff_policy.max_attempts == 5
    exponential = merged.backoff_policy.exponential_backoff
    assert (exponential.initial.ToMilliseconds(), exponential.max.ToMilliseconds()) == (2000, 60000)
    assert exponential.multiplier == 3
    # A group the broker made on the fly: 16 retries, the customized steps 1s 5s 10s 30s 1m ... 2h.
    merged = await consumer_settings(proxy, plain_group, topic, "plain-client")
    assert not merged.subscription.fifo and merged.backoff_policy.max_attempts == 17
    steps = [d.ToMilliseconds() for d in merged.backoff_policy.customized_backoff.next]
    assert steps[:5] == [1000, 5000, 10000, 30000, 60000] and steps[-1] == 7_200_000 and len(steps) == 18

    # A FIFO group is given every queue (its order is per queue); any other group one per broker.
    def assignment(group: str) -> Any:
        endpoints = route_request(topic, proxy.port).endpoints
        request = spb.QueryAssignmentRequest(
            topic=pb.Resource(name=topic), group=pb.Resource(name=group), endpoints=endpoints
        )
        return proxy.call("QueryAssignment", request, spb.QueryAssignmentResponse)

    answer = await assignment(fifo_group)
    assert sorted(a.message_queue.id for a in answer.assignments) == [0, 1, 2]
    answer = await assignment(plain_group)
    assert [a.message_queue.id for a in answer.assignments] == [-1]


class TelemetryClient:
    """An SDK consumer's Telemetry stream (grpcio, in a thread): settings first, then it answers the server's
    stack-trace and verify-message requests as an SDK does."""

    def __init__(self, proxy: Proxy, settings: pb.Settings, client_id: str) -> None:
        self.outbox: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
        self.outbox.put(spb.TelemetryCommand(settings=settings))
        self.synced = threading.Event()
        self.verified: list[pb.Message] = []
        fn = proxy.channel.stream_stream(
            SERVICE + "Telemetry", spb.TelemetryCommand.SerializeToString, spb.TelemetryCommand.FromString
        )
        self.responses = fn(iter(self.outbox.get, None), timeout=30, metadata=[("x-mq-client-id", client_id)])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        ok = pb.Status(code=pb.Code.OK)
        try:
            for command in self.responses:
                which = command.WhichOneof("command")
                if which == "settings":
                    self.synced.set()
                elif which == "print_thread_stack_trace_command":
                    nonce = command.print_thread_stack_trace_command.nonce
                    trace = spb.ThreadStackTrace(nonce=nonce, thread_stack_trace="main: waiting")
                    self.outbox.put(spb.TelemetryCommand(status=ok, thread_stack_trace=trace))
                elif which == "verify_message_command":
                    self.verified.append(command.verify_message_command.message)
                    result = spb.VerifyMessageResult(nonce=command.verify_message_command.nonce)
                    self.outbox.put(spb.TelemetryCommand(status=ok, verify_message_result=result))
        except grpc.RpcError:
            pass  # closed at the end of the test

    def close(self) -> None:
        self.outbox.put(None)
        self.thread.join(5)


@pytest_twisted.ensureDeferred
async def test_broker_requests_relayed_to_a_consumer_over_telemetry(proxy: Proxy) -> None:
    topic = await proxy.topic()
    group = f"ProxyGroup{next(_names)}"
    settings = pb.Settings(
        client_type=pb.ClientType.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic), expression=pb.FilterExpression())],
        ),
    )
    client = TelemetryClient(proxy, settings, "relay-client")
    try:
        assert await deferToThread(client.synced.wait, 10)
        # The proxy's remoting client is the group's member as the broker sees it.
        api = proxy.admin.client.api
        members: list[str] = []
        for _ in range(100):
            members = await api.get_consumer_id_list(proxy.broker_addr, group)
            if members:
                break
            await sleep(0.05)
        assert len(members) == 1
        header = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=members[0], jstack_enable=True)
        request = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.encode())
        response = await proxy.admin.client.remoting.invoke(proxy.broker_addr, request, 10)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert fastjson.loads(response.body)["jstack"] == "main: waiting"
        # mqadmin consumeMessage: a stored message handed to the member, verified by the SDK client.
        producer = Producer(f"ProxyPg{next(_names)}", proxy.admin.client.api.namesrv_addrs)
        await producer.start()
        try:
            sent = await producer.send(build_message(topic, b"verify me", tags="V"))
        finally:
            await producer.shutdown()
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group, client_id=members[0], msg_id=sent.offset_msg_id
        )
        request = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, header.encode())
        response = await proxy.admin.client.remoting.invoke(proxy.broker_addr, request, 10)
        assert response.code == ResponseCode.SUCCESS, response.remark
        result = fastjson.loads(response.body)
        assert result["consumeResult"] == "CR_SUCCESS" and result["remark"] == "from gRPC client"
        [verified] = client.verified
        assert verified.body == b"verify me" and verified.system_properties.tag == "V"
        assert verified.system_properties.message_id == sent.msg_id
    finally:
        client.close()


@pytest_twisted.ensureDeferred
async def test_rpcs_nobody_serves_are_unimplemented(proxy: Proxy) -> None:
    request = spb.SyncLiteSubscriptionRequest(topic=pb.Resource(name="T"), group=pb.Resource(name="G"))
    with pytest.raises(grpc.RpcError) as e:
        await proxy.call("SyncLiteSubscription", request, spb.SyncLiteSubscriptionResponse)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


@given(st.integers(-(2**63), 2**63 - 1), st.integers(1, 64))
def test_consistent_hash_moves_a_key_only_to_a_new_bucket(key: int, buckets: int) -> None:
    before, after = consistent_hash(key, buckets), consistent_hash(key, buckets + 1)
    assert 0 <= before < buckets
    assert after in (before, buckets)
