"""Acceptance: the official RocketMQ 5 Python SDK (rocketmq-python-client 5.1.2, its own venv) against the gRPC
endpoint of ``python -m gateway``; what it sends is read back with our 4.x Python client (mixed generations)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.client import MessageExt, MessageQueue, blocking
from gateway.client.consumer import PullStatus
from gateway.client.security import ClientSecurity
from gateway.remoting import fastjson
from gateway.remoting.bodies import SubscriptionGroupConfig
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import pop_retry_topic
from gateway.remoting.message import MessageConst
from gateway.tls import certs

from .conftest import FAST_CONFIG
from .sdk5 import run_scenario
from .secure_servers import ADMIN, APP, acl_grpc_servers  # noqa: F401
from .servers import GatewayServers, call

pytestmark = pytest.mark.compat

_names = itertools.count()


def topic_on(servers: GatewayServers, prefix: str, queues: int = 4) -> str:
    topic = f"{prefix}{next(_names)}_{int(time.time() * 1000) % 100000}"
    servers.create_topic(topic, queues)
    return topic


def pull_all(
    servers: GatewayServers, topic: str, expect: int, timeout: float = 15.0, security: ClientSecurity | None = None
) -> dict[MessageQueue, list]:
    """Every message of ``topic`` by queue (queue order kept), once ``expect`` arrived or ``timeout`` passed."""
    found: dict[MessageQueue, list[MessageExt]] = {}
    group = f"sdk5_check_{next(_names)}"
    with blocking.PullConsumer(group, servers.namesrv_addr, security=security) as consumer:
        queues = consumer.fetch_subscribe_message_queues(topic)
        offsets = dict.fromkeys(queues, 0)
        deadline = time.monotonic() + timeout
        while sum(len(v) for v in found.values()) < expect and time.monotonic() < deadline:
            for mq in queues:
                result = consumer.pull(mq, "*", offsets[mq], 32)
                if result.status is PullStatus.FOUND:
                    found.setdefault(mq, []).extend(result.messages)
                offsets[mq] = result.next_begin_offset
            time.sleep(0.1)
    return found


def flat(found: dict[MessageQueue, list[MessageExt]]) -> list[MessageExt]:
    return [m for msgs in found.values() for m in msgs]


@pytest.fixture(scope="module")
def grpc_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """``python -m gateway`` (gRPC on a free port) with quick transaction check-backs."""
    # Quick revives (redeliveries in seconds) and SQL92 filters for the consumers.
    config = {
        **FAST_CONFIG,
        "reviveInterval": "200",
        "reviveMaxSlow": "1",
        "enablePropertyFilter": "true",
        "recallMessageEnable": "true",
    }
    s = GatewayServers(tmp_path_factory.mktemp("gateway-sdk5"), config).start()
    assert s.grpc_addr, "the ready line names no gRPC endpoint"
    yield s
    s.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_send_read_by_4x_client(grpc_servers: GatewayServers, asynchronous: bool) -> None:
    topic = topic_on(grpc_servers, "Sdk5Send")
    specs = [
        {"body": f"hello {i}", "tag": "TagA", "keys": [f"key{i}", "other"], "properties": {"color": "red", "n": str(i)}}
        for i in range(3)
    ]
    out = run_scenario(
        "producer", {"endpoint": grpc_servers.grpc_addr, "topic": topic, "messages": specs, "async": asynchronous}
    )
    assert "error" not in out, out
    got = sorted(flat(pull_all(grpc_servers, topic, 3)), key=lambda m: m.body)
    assert [m.body for m in got] == [b"hello 0", b"hello 1", b"hello 2"]
    for i, m in enumerate(got):
        assert m.tags == "TagA"
        assert sorted(m.keys.split(" ")) == sorted([f"key{i}", "other"])
        assert m.properties["color"] == "red" and m.properties["n"] == str(i)
        # The SDK's message id is the UNIQ_KEY a 4.x consumer sees.
        assert m.uniq_key == out["ids"][i]


def test_fifo_message_groups_keep_queue_order(grpc_servers: GatewayServers) -> None:
    topic = topic_on(grpc_servers, "Sdk5Fifo", queues=8)
    specs = [{"body": f"{g}-{i}", "message_group": g} for i in range(6) for g in ("orders-a", "orders-b", "orders-c")]
    out = run_scenario("producer", {"endpoint": grpc_servers.grpc_addr, "topic": topic, "messages": specs})
    assert "error" not in out, out
    found = pull_all(grpc_servers, topic, len(specs))
    by_group: dict[str, list[tuple[int, str]]] = {}
    for mq, msgs in found.items():
        for m in msgs:
            assert m.properties["__SHARDINGKEY"] == m.body.decode().rsplit("-", 1)[0]
            by_group.setdefault(m.properties["__SHARDINGKEY"], []).append((mq.queue_id, m.body.decode()))
    assert set(by_group) == {"orders-a", "orders-b", "orders-c"}
    for group, entries in by_group.items():
        assert len({q for q, _ in entries}) == 1, f"{group} spread over queues: {entries}"
        assert [body for _, body in entries] == [f"{group}-{i}" for i in range(6)]


def test_delivery_timestamp_delays_the_message(grpc_servers: GatewayServers) -> None:
    topic = topic_on(grpc_servers, "Sdk5Delay")
    deliver_s = int(time.time()) + 4
    deliver_ms = deliver_s * 1000
    out = run_scenario(
        "producer",
        {"endpoint": grpc_servers.grpc_addr, "topic": topic, "messages": [{"body": "later", "delivery_s": deliver_s}]},
    )
    assert "error" not in out, out
    assert flat(pull_all(grpc_servers, topic, 1, timeout=1.0)) == [], "delivered before its time"
    got = flat(pull_all(grpc_servers, topic, 1, timeout=15.0))
    assert [m.body for m in got] == [b"later"]
    assert got[0].store_timestamp >= deliver_ms - 50  # stored into the topic when due (timer resolution)
    assert got[0].properties[MessageConst.TIMER_DELIVER_MS] == str(deliver_ms)


def test_recalled_delayed_message_never_arrives(grpc_servers: GatewayServers) -> None:
    topic = topic_on(grpc_servers, "Sdk5Recall", queues=1)
    deliver_s = int(time.time()) + 3
    messages = [{"body": "recalled", "delivery_s": deliver_s}, {"body": "kept", "delivery_s": deliver_s}]
    out = run_scenario(
        "producer", {"endpoint": grpc_servers.grpc_addr, "topic": topic, "messages": messages, "recall": [0]}
    )
    assert "error" not in out, out
    assert out["recalled"] == [out["ids"][0]]
    got = flat(pull_all(grpc_servers, topic, 1, timeout=15.0))
    assert [m.body for m in got] == [b"kept"]
    time.sleep(1.0)  # nothing more comes in a later timer pass
    assert [m.body for m in flat(pull_all(grpc_servers, topic, 2, timeout=1.0))] == [b"kept"]


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_transaction_commit_and_rollback(grpc_servers: GatewayServers, action: str) -> None:
    topic = topic_on(grpc_servers, "Sdk5Tx")
    out = run_scenario("transaction", {"endpoint": grpc_servers.grpc_addr, "topic": topic, "action": action})
    got = flat(pull_all(grpc_servers, topic, 1, timeout=6.0))
    if action == "commit":
        assert [m.uniq_key for m in got] == [out["id"]]
    else:
        assert got == []
    assert out["checked"] == []


def test_orphaned_transaction_checked_back_through_telemetry(grpc_servers: GatewayServers) -> None:
    topic = topic_on(grpc_servers, "Sdk5TxCheck")
    out = run_scenario(
        "transaction",
        {"endpoint": grpc_servers.grpc_addr, "topic": topic, "action": "orphan", "check": "COMMIT", "wait": 30},
        timeout=90,
    )
    assert out["checked"] and out["checked"][0] == out["id"], out
    got = flat(pull_all(grpc_servers, topic, 1, timeout=10.0))
    assert [m.uniq_key for m in got] == [out["id"]]


def test_tls_and_plaintext_on_one_port(tmp_path: Path, pki: certs.DevPki) -> None:
    tls = {**pki.server_properties(), "tls.server.mode": "permissive", "tls.server.need.client.auth": "none"}
    servers = GatewayServers(tmp_path / "gateway", tls).start()
    try:
        topic = topic_on(servers, "Sdk5Tls")
        args = {"endpoint": servers.grpc_addr, "topic": topic, "messages": [{"body": "secret"}]}
        # The SDK verifies the server against the roots gRPC is given: our dev CA.
        out = run_scenario(
            "producer", {**args, "tls": True}, env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": pki.path("ca.pem")}
        )
        assert "error" not in out, out
        plain = run_scenario("producer", {**args, "messages": [{"body": "plain"}]})
        assert "error" not in plain, plain
        assert sorted(m.body for m in flat(pull_all(servers, topic, 2))) == [b"plain", b"secret"]
    finally:
        servers.stop()


def test_acl_account_allowed_and_refused(acl_grpc_servers: GatewayServers) -> None:  # noqa: F811
    servers = acl_grpc_servers
    topic = topic_on(servers, "Sdk5Acl")
    base = {"endpoint": servers.grpc_addr, "messages": [{"body": "signed"}]}
    allowed = run_scenario("producer", {**base, "topic": topic, "ak": APP.access_key, "sk": APP.secret_key})
    assert "error" not in allowed, allowed
    denied = run_scenario("producer", {**base, "topic": "DeniedTopic", "ak": APP.access_key, "sk": APP.secret_key})
    # Refused from its first call (QueryRoute needs PUB or SUB on the topic).
    assert "DeniedTopic" in denied.get("error", ""), denied
    wrong = run_scenario("producer", {**base, "topic": topic, "ak": APP.access_key, "sk": "not-the-secret"})
    assert "error" in wrong, wrong
    got = flat(pull_all(servers, topic, 1, security=ClientSecurity(ADMIN)))
    assert [m.body for m in got] == [b"signed"]


def _consume(servers: GatewayServers, kind: str, count: int, **options) -> list[dict]:
    topic = topic_on(servers, f"Sdk5{kind.title()}")
    specs = [
        {"body": f"m{i}", "tag": f"Tag{i % 2}", "keys": [f"k{i}"], "properties": {"i": str(i)}} for i in range(count)
    ]
    want = options.pop("want", count)
    out = run_scenario(
        "consumer",
        {"endpoint": servers.grpc_addr, "topic": topic, "group": f"Sdk5G{next(_names)}", "kind": kind,
         "send": specs, "want": want, **options},
        timeout=90,
    )  # fmt: skip
    return out["received"]


def test_simple_consumer_receives_and_acks(grpc_servers: GatewayServers) -> None:
    got = _consume(grpc_servers, "simple", 4)
    assert sorted(m["body"] for m in got) == ["m0", "m1", "m2", "m3"], got
    for m in got:
        i = int(m["body"][1:])
        assert (m["tag"], m["keys"], m["props"], m["attempt"]) == (f"Tag{i % 2}", [f"k{i}"], {"i": str(i)}, 1)


def test_simple_consumer_change_invisible_duration_redelivers(grpc_servers: GatewayServers) -> None:
    got = _consume(grpc_servers, "simple", 2, retry_first=True)
    attempts = sorted((m["body"], m["attempt"]) for m in got)
    assert attempts == [("m0", 1), ("m0", 2), ("m1", 1), ("m1", 2)], got
    first = {m["body"]: m["id"] for m in got if m["attempt"] == 1}
    assert all(m["id"] == first[m["body"]] for m in got), "a redelivery keeps its message id"


def test_push_consumer_retries_a_failed_message(grpc_servers: GatewayServers) -> None:
    got = _consume(grpc_servers, "push", 3, retry_first=True)
    assert sorted((m["body"], m["attempt"]) for m in got) == [(f"m{i}", a) for i in range(3) for a in (1, 2)], got


@pytest.mark.parametrize("sql", [False, True], ids=["tag", "sql92"])
def test_consumer_filter_expressions(grpc_servers: GatewayServers, sql: bool) -> None:
    expression = "i IN ('1', '3')" if sql else "Tag1"
    got = _consume(grpc_servers, "simple", 4, want=2, expression=expression, sql=sql, wait=15)
    assert sorted(m["body"] for m in got) == ["m1", "m3"], got


def test_simple_consumer_dead_letter_queue_after_max_attempts(grpc_servers: GatewayServers) -> None:
    """A group with retryMaxTimes 1 gets a refused message twice (attempts 1 and 2), then finds it in
    %DLQ%group with its body, never delivered a third time."""
    group = f"Sdk5Dlq{next(_names)}"
    config = SubscriptionGroupConfig(group_name=group, retry_max_times=1)
    request = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumps(config.to_json())
    )
    assert call(grpc_servers.broker_addr, request).code == 0
    topic = topic_on(grpc_servers, "Sdk5Dlq")
    out = run_scenario(
        "consumer",
        {"endpoint": grpc_servers.grpc_addr, "topic": topic, "group": group, "kind": "simple",
         "send": [{"body": "poison", "tag": "T"}], "want": 1, "fail": {"poison": 100}, "wait": 8},
        timeout=60,
    )  # fmt: skip
    got = out["received"]
    assert [(m["body"], m["attempt"]) for m in got] == [("poison", 1), ("poison", 2)], got
    dead = flat(pull_all(grpc_servers, f"%DLQ%{group}", 1))
    assert [m.body for m in dead] == [b"poison"], dead
    # The same message (its id, its tag); the send back to the DLQ counted as one more consumption.
    assert (dead[0].uniq_key, dead[0].tags, dead[0].reconsume_times) == (got[0]["id"], "T", 3)


def test_fifo_push_consumer_keeps_each_message_group_in_order(grpc_servers: GatewayServers) -> None:
    """A group marked orderly with our admin tool (-o true, a 2 s retry step): the 5.x PushConsumer is told FIFO and
    the backoff over Telemetry, consumes each message group in send order, and retries a failed message in place
    after the group's 2 s step, its group waiting for it (the slow first message makes the rest of orders-a arrive
    in one batch, where a concurrent consumer would go on past the failed one)."""
    group = f"Sdk5FifoPush{next(_names)}"
    policy = '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[2000]}}'
    marked = subprocess.run(
        [sys.executable, "-m", "gateway.admin", "updateSubGroup", "-n", grpc_servers.namesrv_addr,
         "-b", grpc_servers.broker_addr, "-g", group, "-o", "true", "-r", "3", "-p", policy],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert marked.returncode == 0, marked.stderr
    topic = topic_on(grpc_servers, "Sdk5FifoPush")
    groups = ("orders-a", "orders-b", "orders-c")
    specs = [{"body": f"{g}-{i}", "message_group": g} for i in range(5) for g in groups]
    out = run_scenario(
        "consumer",
        {"endpoint": grpc_servers.grpc_addr, "topic": topic, "group": group, "kind": "push",
         "send": specs, "want": len(specs), "fail": {"orders-a-2": 1}, "slow": {"orders-a-0": 1.5}, "wait": 40},
        timeout=90,
    )  # fmt: skip
    got = out["received"]
    by_group: dict[str, list[dict]] = {}
    for m in got:
        by_group.setdefault(m["group"], []).append(m)
    assert [m["body"] for m in by_group["orders-b"]] == [f"orders-b-{i}" for i in range(5)], got
    assert [m["body"] for m in by_group["orders-c"]] == [f"orders-c-{i}" for i in range(5)], got
    # orders-a-2 failed once: it comes again before orders-a-3, after the group's retry step.
    a = by_group["orders-a"]
    assert [m["body"] for m in a] == [
        "orders-a-0",
        "orders-a-1",
        "orders-a-2",
        "orders-a-2",
        "orders-a-3",
        "orders-a-4",
    ], got
    assert a[3]["at"] - a[2]["at"] >= 1.8, a


PROXY_READY = re.compile(r"rocketmq-gateway proxy ready: gRPC on (\S+),")


@contextlib.contextmanager
def standalone_proxy(servers: GatewayServers, tmp_path: Path, settings: dict[str, str]) -> Iterator[str]:
    """``python -m gateway.proxy -c proxy.properties`` in front of ``servers``; yields its gRPC endpoint."""
    conf = tmp_path / "proxy.properties"
    lines = {"namesrvAddr": servers.namesrv_addr, "grpcServerPort": "0", "bindAddress": "127.0.0.1", **settings}
    conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    argv = [sys.executable, "-m", "gateway.proxy", "-c", str(conf)]
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if m := PROXY_READY.search(line):
                    break
            else:
                raise AssertionError("the proxy did not start")
            # Its output is read no further: keep the pipe from filling.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            yield m.group(1)
        finally:
            proc.terminate()
            proc.wait(20)


def test_push_consumer_listener_longer_than_the_invisible_time_is_not_redelivered(
    grpc_servers: GatewayServers, tmp_path: Path
) -> None:
    """A PushConsumer asks for auto renew: the proxy pops for defaultInvisibleTimeMills (3 s here) and renews the
    message while the listener takes 7 s over it; the ack then uses the renewed handle, so nothing is left in
    flight, nothing is revived and there is no second delivery."""
    topic = topic_on(grpc_servers, "Sdk5Renew")
    group = f"Sdk5G{next(_names)}"
    renew = {"defaultInvisibleTimeMills": "3000", "renewAheadTimeMillis": "2000", "renewSchedulePeriodMillis": "300"}
    with standalone_proxy(grpc_servers, tmp_path, renew) as endpoint:
        out = run_scenario(
            "consumer",
            {"endpoint": endpoint, "topic": topic, "group": group, "kind": "push", "send": [{"body": "slow"}],
             "want": 1, "slow": {"slow": 7}, "wait": 20},
            timeout=60,
        )  # fmt: skip
    assert [(m["body"], m["attempt"]) for m in out["received"]] == [("slow", 1)], out
    stats = call(
        grpc_servers.broker_addr,
        RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}),
    )
    assert stats.code == 0 and b"popInflight" not in stats.body, stats.body
    # Nothing came back to be redelivered: the pop retry topic holds nothing (or was never made).
    retry = pop_retry_topic(topic, group)
    revived = call(
        grpc_servers.broker_addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": retry, "queueId": "0"})
    )
    assert revived.code != 0 or revived.ext_fields["offset"] == "0", revived.ext_fields
