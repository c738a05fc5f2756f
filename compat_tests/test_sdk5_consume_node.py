"""The RocketMQ 5.x Node.js SDK (rocketmq-client-nodejs 1.0.8) consuming through our gRPC endpoint.

SimpleConsumer receive/ack, change of invisible duration, redelivery after the invisible time with the
delivery attempt counted, the dead-letter queue after the group's max attempts, a PushConsumer consuming
concurrently, tag and SQL92 filters, and mixed generations: our 4.x client's messages read by the 5.x SDK,
the 5.x SDK's messages read by a 4.x push consumer of another group at the same time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.client.blocking import Admin, Producer, PushConsumer
from gateway.client.push_consumer import ConsumeStatus
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    ExponentialRetryPolicy,
    GroupRetryPolicy,
    GroupRetryPolicyType,
    SubscriptionGroupConfig,
)
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import Message

from . import sdk5_node
from .servers import GatewayServers, call, free_port

sdk5_node.require_sdk()

pytestmark = pytest.mark.compat

# A quick revive, so redeliveries take seconds; SQL92 filters.
CONFIG = {"reviveInterval": "200", "reviveMaxSlow": "1", "enablePropertyFilter": "true"}


@pytest.fixture(scope="module")
def sdk5_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """``python -m gateway`` (NameServer, Broker and the gRPC endpoint in one process)."""
    port = free_port()
    s = GatewayServers(tmp_path_factory.mktemp("sdk5-consume"), {**CONFIG, "grpcServerPort": str(port)}).start()
    s.grpc_endpoint = f"127.0.0.1:{port}"
    yield s
    s.close()


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _topic(servers: GatewayServers) -> str:
    topic = _unique("sdk5_t")
    servers.create_topic(topic, queues=2)
    return topic


def _spec(run: str, i: int, **extra: Any) -> dict[str, Any]:
    return {
        "i": i,
        "body": f"{run} body {i} \u00e9\u4e2d",
        "tag": f"Tag{i % 3}",
        "keys": [f"{run}-k{i}", f"alt{i}"],
        "props": {"run": run, "idx": str(i)},
        **extra,
    }


def _start(servers: GatewayServers, topic: str, **options: Any) -> sdk5_node.Background:
    """A SimpleConsumer, started before anything is sent: a new group pops from the end of the queues."""
    consumer = sdk5_node.start("simple_consumer", servers.grpc_endpoint, topic, **options)
    time.sleep(1)  # its first receive places the group
    return consumer


def _finish(consumer: sdk5_node.Background) -> Any:
    got = consumer.finish()
    assert got.returncode == 0, got.describe()
    return got


def _by_idx(events: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(int(e["props"]["idx"]), []).append(e)
    return out


def test_simple_consumer_receive_and_ack(sdk5_servers, tmp_path):
    """Five messages arrive once each with tag, keys, properties, body and a receipt handle in Apache's format;
    once acked none comes back."""
    topic, group, run = _topic(sdk5_servers), _unique("sdk5_g"), _unique("r")
    consumer = _start(sdk5_servers, topic, group=group, acks=5, invisible=10000, linger=3)
    specs = [_spec(run, i) for i in range(5)]
    sent = sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, specs)
    got = _finish(consumer)
    ids = {e["i"]: e["messageId"] for e in sent.of("sent")}
    msgs = _by_idx(got.of("msg"))
    assert sorted(msgs) == list(range(5)), got.describe()
    for i, deliveries in msgs.items():
        assert len(deliveries) == 1, f"message {i} delivered {len(deliveries)} times"
        m, spec = deliveries[0], specs[i]
        assert (m["body"], m["tag"], m["keys"], m["props"]) == (spec["body"], spec["tag"], spec["keys"], spec["props"])
        assert m["messageId"] == ids[i] and m["deliveryAttempt"] == 1 and not m["corrupted"]
        fields = m["receiptHandle"].split(" ")
        assert len(fields) == 9 and fields[4] == "0" and fields[5] == "broker-a", m["receiptHandle"]
    assert not got.of("settle_error") and len(got.of("acked")) == 5


def test_change_invisible_duration_then_redelivery_counts_attempts(sdk5_servers, tmp_path):
    """A changed invisible duration gives a new receipt handle; the message comes back after the new duration
    (not the 30 s it was received with) as delivery attempt 2, is acked with its new handle and stays acked."""
    topic, group, run = _topic(sdk5_servers), _unique("sdk5_g"), _unique("r")
    options = {"acks": 1, "nack_times": 1, "invisible": 30000, "change_invisible": 1000, "linger": 2}
    consumer = _start(sdk5_servers, topic, group=group, timeout=40, **options)
    started = time.monotonic()
    sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, [_spec(run, 0)])
    got = _finish(consumer)
    assert time.monotonic() - started < 25, "the message waited for its first invisible duration"
    deliveries = got.of("msg")
    assert [m["deliveryAttempt"] for m in deliveries] == [1, 2], got.describe()
    changed = got.of("changed")
    assert len(changed) == 1 and changed[0]["before"] != changed[0]["after"], got.describe()
    before, after = changed[0]["before"].split(" "), changed[0]["after"].split(" ")
    assert len(after) == 9 and after[2] == "1000" and after[5:] == before[5:], changed[0]
    assert deliveries[1]["receiptHandle"].split(" ")[4] == "1", "a redelivery comes from the pop retry topic"
    assert not got.of("settle_error") and len(got.of("acked")) == 1, got.describe()


def test_redelivery_after_invisible_time(sdk5_servers, tmp_path):
    """An unacked message comes back on its own after the invisible time, as delivery attempt 2."""
    topic, group, run = _topic(sdk5_servers), _unique("sdk5_g"), _unique("r")
    # 10 s: the least Apache's proxy allows a simple consumer (minInvisibleTimeMillsForRecv).
    consumer = _start(sdk5_servers, topic, group=group, acks=1, nack_times=1, invisible=10000, linger=2, timeout=40)
    sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, [_spec(run, 0)])
    got = _finish(consumer)
    first, second = got.of("msg")
    assert (first["deliveryAttempt"], second["deliveryAttempt"]) == (1, 2), got.describe()
    assert second["receiptHandle"] != first["receiptHandle"] and len(got.of("acked")) == 1


def test_dead_letter_queue_after_max_attempts(sdk5_servers, tmp_path):
    """A group with retryMaxTimes 1 gets a message twice; then it is in %DLQ%group, not delivered again."""
    topic, group, run = _topic(sdk5_servers), _unique("sdk5_g"), _unique("r")
    config = SubscriptionGroupConfig(group_name=group, retry_max_times=1)
    body = fastjson.dumps(config.to_json())
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    assert call(sdk5_servers.broker_addr, request).code == 0
    options = {"deliveries": 2, "nack_times": 100, "change_invisible": 1000, "linger": 6}
    consumer = _start(sdk5_servers, topic, group=group, timeout=40, **options)
    sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, [_spec(run, 0)])
    got = _finish(consumer)
    assert [m["deliveryAttempt"] for m in got.of("msg")] == [1, 2], got.describe()
    with Admin(sdk5_servers.namesrv_addr) as admin:
        queues = admin.fetch_subscribe_message_queues(f"%DLQ%{group}")
        assert sum(admin.max_offset(q) for q in queues) == 1


def test_push_consumer_consumes_concurrently_and_retries(sdk5_servers, tmp_path):
    """Twenty messages through a PushConsumer whose listener takes 300 ms: several run at once; the first
    delivery of each fails, so each comes back once (attempt 2) and is then consumed."""
    topic, group, run = _topic(sdk5_servers), _unique("sdk5_g"), _unique("r")
    consumer = sdk5_node.start(
        "push_consumer", sdk5_servers.grpc_endpoint, topic, group=group, acks=20, fail_times=1, work_ms=300, linger=2
    )
    time.sleep(2)  # its assignment and first receive
    sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, [_spec(run, i) for i in range(20)])
    got = _finish(consumer)
    msgs = _by_idx(got.of("msg"))
    assert sorted(msgs) == list(range(20)), got.describe()
    for i, deliveries in msgs.items():
        assert [m["deliveryAttempt"] for m in deliveries] == [1, 2], f"message {i}: {deliveries}"
    assert max(m["active"] for m in got.of("msg")) > 1, "the listener never ran concurrently"


def test_fifo_push_consumer_keeps_message_groups_in_order(sdk5_servers, tmp_path):
    """A group marked orderly over remoting (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with consumeMessageOrderly and an
    exponential retry policy, the only one this SDK reads): the PushConsumer is told FIFO and 4 attempts over
    Telemetry, consumes each message group in send order, and retries a failed message in place (attempts 1, 2,
    3) before the next message of its group."""
    topic, group, run = _topic(sdk5_servers), _unique("sdk5_fifo"), _unique("r")
    policy = GroupRetryPolicy(GroupRetryPolicyType.EXPONENTIAL, ExponentialRetryPolicy(1000, 10000, 2))
    config = SubscriptionGroupConfig(group, retry_max_times=3, consume_message_orderly=True, group_retry_policy=policy)
    request = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumps(config.to_json())
    )
    assert call(sdk5_servers.broker_addr, request).code == 0
    consumer = sdk5_node.start(
        "push_consumer", sdk5_servers.grpc_endpoint, topic, group=group, acks=12, fail_times=2, fail_tag="Poison",
        work_ms=100, linger=2,
    )  # fmt: skip
    time.sleep(2)  # its assignment and first receive
    specs = [_spec(run, i, group=f"g{i % 3}") for i in range(12)]
    specs[4]["tag"] = "Poison"  # the second message of g1
    sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, specs)
    got = _finish(consumer)
    by_group: dict[str, list[tuple[int, int]]] = {}
    for m in got.of("msg"):
        by_group.setdefault(m["messageGroup"], []).append((int(m["props"]["idx"]), m["deliveryAttempt"]))
    assert by_group["g0"] == [(0, 1), (3, 1), (6, 1), (9, 1)], got.describe()
    assert by_group["g1"] == [(1, 1), (4, 1), (4, 2), (4, 3), (7, 1), (10, 1)], got.describe()
    assert by_group["g2"] == [(2, 1), (5, 1), (8, 1), (11, 1)], got.describe()
    assert len(got.of("failed")) == 2


def test_tag_and_sql_filters(sdk5_servers, tmp_path):
    """A tag expression and a SQL92 expression each get exactly the messages they select."""
    topic, run = _topic(sdk5_servers), _unique("r")
    by_tag = _start(sdk5_servers, topic, group=_unique("sdk5_tag"), expression="Tag0 || Tag2", acks=6, linger=2)
    sql = "idx IN ('1', '4', '7')"
    by_sql = _start(sdk5_servers, topic, group=_unique("sdk5_sql"), expression=sql, sql=True, acks=3, linger=2)
    sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, [_spec(run, i) for i in range(9)])
    tagged = _finish(by_tag)
    assert sorted(_by_idx(tagged.of("msg"))) == [0, 2, 3, 5, 6, 8], tagged.describe()  # Tag0, Tag1, Tag2 in turn
    selected = _finish(by_sql)
    assert sorted(_by_idx(selected.of("msg"))) == [1, 4, 7], selected.describe()


def test_mixed_generations(sdk5_servers, tmp_path):
    """Our 4.x client's message is read by a 5.x SimpleConsumer with body, tag, keys and properties; a 5.x
    message is read at the same time by a 4.x push consumer of another group and by the 5.x consumer."""
    topic, run = _topic(sdk5_servers), _unique("r")
    received: list = []
    done = threading.Event()

    def listener(msgs):
        received.extend(msgs)
        if len(received) >= 2:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    old = PushConsumer(_unique("old_g"), sdk5_servers.namesrv_addr)
    old.subscribe(topic, "*")
    old.register_message_listener(listener)
    with old:  # starts it
        new = _start(sdk5_servers, topic, group=_unique("sdk5_g"), acks=2, linger=1)
        time.sleep(2)  # the 4.x consumer's first rebalance: a new 4.x group starts at the queues' ends
        with Producer(_unique("old_pg"), sdk5_servers.namesrv_addr) as producer:
            props = {"TAGS": "Old", "KEYS": "k4 k4b", "run": run}
            producer.send(Message(topic, f"{run} from 4.x".encode(), properties=props))
        sdk5_node.produce(tmp_path, sdk5_servers.grpc_endpoint, topic, [_spec(run, 1)])
        got = _finish(new)
        assert done.wait(30), f"the 4.x consumer got {len(received)} of 2"
    by_body = {m["body"]: m for m in got.of("msg")}
    old_msg = by_body[f"{run} from 4.x"]
    assert (old_msg["tag"], old_msg["keys"], old_msg["props"]) == ("Old", ["k4", "k4b"], {"run": run})
    assert _spec(run, 1)["body"] in by_body
    (new_in_old,) = [m for m in received if m.properties.get("idx") == "1"]
    assert new_in_old.body.decode() == _spec(run, 1)["body"]
    assert (new_in_old.tags, new_in_old.keys) == ("Tag1", f"{run}-k1 alt1")
