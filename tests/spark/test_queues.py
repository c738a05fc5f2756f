"""The data source's reading side without Spark: pipelined pulls of an offset range from our broker, the
columnar decoder (compressed bodies included), and option errors that name the option."""

from __future__ import annotations

import time
from typing import Any

import pytest

from compat_tests.secure_servers import ADMIN, acl_servers, pki, tls_context, tls_servers  # noqa: F401
from compat_tests.servers import GatewayServers, call, create_topic_request, free_port
from gateway.client import blocking, build_message
from gateway.config import ConfigError
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.tls import certs
from spark import queues as rq
from spark.columns import RecordColumns
from tests.broker.test_broker_server import send_header


@pytest.fixture(scope="module")
def topic(servers: GatewayServers) -> dict[int, str]:
    """A one-queue topic of 100 messages, every tenth one over 4 KiB (sent compressed); msgId by offset."""
    servers.create_topic("QueuesRead", 1)
    ids = {}
    with blocking.Producer("queues_read_pg", servers.namesrv_addr) as producer:
        for i in range(100):
            body = (b"%d-" % i) * (2000 if i % 10 == 0 else 1)
            r = producer.send(build_message("QueuesRead", body, keys=f"k{i}"))
            ids[r.queue_offset] = r.msg_id
    return ids


def rows(servers: GatewayServers, start: int, end: int, window: int = 4) -> list[tuple]:
    settings = rq.Settings.from_options({"namesrvAddr": servers.namesrv_addr, "topic": "QueuesRead"})
    (queue,) = rq.queues(settings)
    columns = RecordColumns()
    for body in rq.read_range(settings, queue, start, end, window):
        columns.add_records(body, start, end)
    return columns.rows


@pytest.mark.parametrize("window", [1, 4, 8])
def test_a_range_is_read_exactly_whatever_the_window(
    servers: GatewayServers, topic: dict[int, str], window: int
) -> None:
    got = rows(servers, 0, 100, window)
    assert [r[0] for r in got] == list(range(100))
    assert [r[2] for r in got] == [topic[i] for i in range(100)]
    assert got[10][10] == b"10-" * 2000 and got[11][10] == b"11-"  # decompressed as clients do
    assert [r[3] for r in got[:3]] == ["k0", "k1", "k2"]


def test_part_of_a_queue_and_a_range_past_its_end(servers: GatewayServers, topic: dict[int, str]) -> None:
    assert [r[0] for r in rows(servers, 10, 45)] == list(range(10, 45))
    assert [r[0] for r in rows(servers, 90, 500)] == list(range(90, 100))
    assert rows(servers, 100, 200) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "T"}, "namesrvAddr is required"),
        ({"namesrvAddr": "127.0.0.1:1", "topic": "bad topic!"}, "option topic"),
        ({"namesrvAddr": "127.0.0.1:1", "topic": "T", "accessKey": "ak"}, "accessKey and secretKey"),
        ({"namesrvAddr": "127.0.0.1:1", "topic": "T", "tls.enable": "maybe"}, "tls.enable"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises((rq.SourceError, ConfigError), match=message):
        rq.Settings.from_options(options)


def test_an_unknown_topic_is_an_error(servers: GatewayServers) -> None:
    settings = rq.Settings.from_options({"namesrvAddr": servers.namesrv_addr, "topic": "NoSuchTopicHere"})
    with pytest.raises(rq.SourceError, match="not routed"):
        rq.queues(settings)
    bad = rq.Settings.from_options({"namesrvAddr": servers.namesrv_addr, "topic": "QueuesRead"})
    with pytest.raises(rq.SourceError, match="startingOffsets"):
        rq.resolve(bad, rq.queues(bad), "[1, 2]", "startingOffsets", "earliest")


def _one_message(servers: GatewayServers, topic: str, sign: Any = None, tls: Any = None) -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(topic, {}, 0), b"secured")
    if sign is not None:
        sign(request)
    assert call(servers.broker_addr, request, tls=tls).code == ResponseCode.SUCCESS


def _read_all(options: dict[str, str]) -> list[tuple]:
    settings = rq.Settings.from_options(options)
    qs = rq.queues(settings)
    ends = rq.queue_offsets(settings, qs, "latest")
    columns = RecordColumns()
    for q in qs:
        for body in rq.read_range(settings, q, 0, ends[q.broker][str(q.queue_id)]):
            columns.add_records(body, 0, ends[q.broker][str(q.queue_id)])
    return columns.rows


def test_acl_options_sign_every_request(acl_servers: GatewayServers) -> None:  # noqa: F811
    acl_servers.create_topic("SparkAclTopic", 1)
    _one_message(acl_servers, "SparkAclTopic", ADMIN.sign)
    options = {"namesrvAddr": acl_servers.namesrv_addr, "topic": "SparkAclTopic"}
    with pytest.raises(rq.SourceError, match="No accessKey is configured"):
        _read_all(options)
    got = _read_all({**options, "accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})
    assert [r[10] for r in got] == [b"secured"]


def test_tls_options_reach_an_enforcing_mutual_tls_cluster(
    tls_servers: GatewayServers,  # noqa: F811
    pki: certs.DevPki,  # noqa: F811
) -> None:
    context = tls_context(pki)
    assert call(tls_servers.broker_addr, create_topic_request("SparkTlsTopic", 1), tls=context).code == 0
    _one_message(tls_servers, "SparkTlsTopic", tls=context)
    options = {"namesrvAddr": tls_servers.namesrv_addr, "topic": "SparkTlsTopic"}
    with pytest.raises(rq.SourceError, match="no name server answered"):
        _read_all(options)  # plain TCP to enforcing servers
    deadline = time.monotonic() + 10
    while True:  # the broker registers the new topic with the NameServer in the background
        try:
            got = _read_all({**options, **pki.client_properties()})
            break
        except rq.SourceError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert [r[10] for r in got] == [b"secured"]


def test_a_queue_whose_replicas_are_all_down_fails_at_once() -> None:
    settings = rq.Settings.from_options({"namesrvAddr": "127.0.0.1:1", "topic": "T", "timeoutMs": "2000"})
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    started = time.monotonic()
    with pytest.raises(OSError):
        list(rq.read_range(settings, rq.Queue("broker-x", 0, tuple(dead)), 0, 10))
    assert time.monotonic() - started < 5
