"""The ``rocketmq`` sink on real Spark (local[2]) against our broker in a child process: 10,000 rows written
and read back by the C++ 4.x client and by the source (keyed rows in order on one queue, delays kept), a
stream copying a topic batch by batch, the broker's refusals in the job's error, retries on another
broker, ACL and TLS."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.types import BinaryType, IntegerType, MapType, StringType, StructField, StructType

from compat_tests.secure_servers import APP, acl_servers, pki, tls_context, tls_servers  # noqa: F401
from compat_tests.servers import GatewayServers, call, create_topic_request, free_port
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.message import java_string_hash
from gateway.tls import certs
from spark import queues as rq
from spark import sink
from tests.ha.procs import Proc, bodies, until, write_properties

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
KEYS = 8


def options(servers: GatewayServers, topic: str, **more: str) -> dict[str, str]:
    return {"namesrvAddr": servers.namesrv_addr, "topic": topic, **more}


def write(df: Any, **opts: str) -> None:
    df.write.format("rocketmq").options(**opts).mode("append").save()


def read(spark: Any, **opts: str) -> list[Any]:
    return spark.read.format("rocketmq").options(**opts).load().collect()


def stored(servers: GatewayServers, topic: str, **more: str) -> int:
    settings = rq.Settings.from_options(options(servers, topic, **more))
    ends = rq.queue_offsets(settings, rq.queues(settings), "latest")
    return sum(o for per in ends.values() for o in per.values())


def wait_stored(servers: GatewayServers, topic: str, n: int, timeout: float = 15, **more: str) -> None:
    deadline = time.monotonic() + timeout
    while (have := stored(servers, topic, **more)) < n:
        assert time.monotonic() < deadline, f"{topic} holds {have} of {n} messages"
        time.sleep(0.2)


def cpp_pull(tmp_path: Path, servers: GatewayServers, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` as the C++ client's PullConsumer reads it (compat_tests/cpp_client.py)."""
    home = tmp_path / "cpp-home"
    home.mkdir()
    command = ["pull", "--namesrv", servers.namesrv_addr, "--topic", topic, "--group", "sink_cpp", "--timeout", "60"]
    proc = subprocess.run(
        [sys.executable, "-m", "compat_tests.cpp_client", *command],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        env=dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT)),
        stdin=subprocess.DEVNULL,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines and lines[-1]["event"] == "done", proc.stderr[-2000:]
    return [m for m in lines if m["event"] == "msg"]


def test_ten_thousand_rows_arrive_once_keyed_rows_in_order(spark: Any, servers: GatewayServers, tmp_path: Path) -> None:
    topic = "SinkTenThousand"
    servers.create_topic(topic, 4)
    deliver_at = int(time.time() * 1000) + 4000
    schema = "body string, keys string, tags string, properties map<string,string>, shardingKey string, "
    schema += "delayTimeLevel int, deliverTimeMs long"
    rows = []
    for i in range(10_000):
        kind = "delay" if i % 500 == 1 else "timer" if i % 500 == 2 else "keyed"
        key = f"key{i % KEYS}" if kind == "keyed" else None
        props = {"run": kind, "idx": str(i), "user-prop": f"value {i} = \u00fc"}
        rows.append(
            (f"row {i} \u00e9 {'x' * (i % 40)}", f"id{i} alt{i}", f"Tag{i % 3}", props, key,
             1 if kind == "delay" else None, deliver_at if kind == "timer" else None)
        )  # fmt: skip
    # As with Kafka, a key's rows keep their order if one task writes them in order.
    df = spark.createDataFrame([(*r, i) for i, r in enumerate(rows)], schema + ", seq int")
    write(df.repartition(3, "shardingKey").sortWithinPartitions("seq"), **options(servers, topic))
    wait_stored(servers, topic, 10_000)  # the delayed rows come in after their time

    def check(i: int, body: str, keys: str, tags: str, props: dict[str, str]) -> None:
        assert (body, keys, tags) == rows[i][:3]
        assert {k: props.get(k) for k in ("run", "idx", "user-prop")} == rows[i][3]

    got = read(spark, **options(servers, topic))
    assert sorted(int(r.properties["idx"]) for r in got) == list(range(10_000))
    per_key: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for r in got:
        i = int(r.properties["idx"])
        check(i, r.body.decode(), r.keys, r.tags, r.properties)
        store_ms = r.storeTimestamp.timestamp() * 1000
        if rows[i][6] is not None:  # a timer message: stored in the topic once due
            assert store_ms >= deliver_at - 1
        elif rows[i][5] is not None:  # delay level 1 = 1 s here
            assert store_ms - r.bornTimestamp.timestamp() * 1000 >= 990
        else:
            per_key[rows[i][4]].append((r.queueId, r.queueOffset, i))
    assert len(per_key) == KEYS
    for key, placed in per_key.items():
        assert len({q for q, _, _ in placed}) == 1, f"{key} spread over queues"
        assert [i for _, _, i in sorted(placed)] == sorted(i for _, _, i in placed), f"{key} out of order"

    if importlib.util.find_spec("rocketmq") is None:
        return  # the C++ client (PyPI rocketmq==0.4.4) is not installed
    pulled = cpp_pull(tmp_path, servers, topic)
    assert sorted(int(m["props"]["idx"]) for m in pulled) == list(range(10_000))
    for m in pulled:
        check(int(m["props"]["idx"]), m["body"], m["keys"], m["tags"], m["props"])


def test_a_sharding_key_picks_the_queue_apache_hashes_it_to() -> None:
    chooser = sink.QueueChooser(sink.SinkSettings.from_options({"namesrvAddr": "127.0.0.1:1"}))
    qs = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(4)]
    chooser._queues["T"] = qs
    # SelectMessageQueueByHash: Math.abs("hello".hashCode() % 8) = 99162322 % 8 = 2; "polygenelubricants" hashes
    # to Integer.MIN_VALUE, whose remainder is 0.
    assert chooser.choose("T", "hello") == qs[2]
    assert chooser.choose("T", "polygenelubricants") == qs[0]
    assert chooser.choose("T", "hello") == qs[2]
    assert {chooser.choose("T", None) for _ in range(8)} == set(qs)  # round robin
    assert chooser.another(qs[1]).broker_name == "broker-b"


def test_a_stream_copies_a_topic_batch_by_batch(spark: Any, servers: GatewayServers, tmp_path: Path) -> None:
    source, target = "SinkStreamIn", "SinkStreamOut"
    servers.create_topic(source, 2)
    servers.create_topic(target, 2)

    def produce(first: int, n: int) -> None:
        df = spark.createDataFrame([(f"s{i}", f"k{i}") for i in range(first, first + n)], "body string, keys string")
        write(df, **options(servers, source))

    def run() -> None:
        stream = (
            spark.readStream.format("rocketmq").options(**options(servers, source), maxRecordsPerTrigger="250").load()
        )
        query = (
            stream.selectExpr("body", "keys", "'copied' AS tags")
            .writeStream.format("rocketmq")
            .options(**options(servers, target))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(60)
        assert not query.isActive and query.exception() is None
        return query

    produce(0, 400)
    first = run()
    assert len(first.recentProgress) >= 2  # 400 rows at most 250 a batch
    produce(400, 100)
    run()
    got = read(spark, **options(servers, target))
    assert sorted(r.body for r in got) == sorted(b"s%d" % i for i in range(500))
    assert {r.tags for r in got} == {"copied"} and all(r.keys == "k" + r.body.decode()[1:] for r in got)


@pytest.fixture(scope="module")
def closed_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path_factory.mktemp("gateway-no-autocreate"), {"autoCreateTopicEnable": "false"}).start()
    yield s
    s.close()


def test_bad_columns_fail_at_once_naming_the_column(spark: Any, servers: GatewayServers) -> None:
    opts = options(servers, "SinkNeverWritten")
    with pytest.raises(Exception, match="column body is required"):
        write(spark.createDataFrame([("x",)], "payload string"), **opts)
    with pytest.raises(Exception, match="column delayTimeLevel must be int, not string"):
        write(spark.createDataFrame([("x", "1")], "body string, delayTimeLevel string"), **opts)
    with pytest.raises(Exception, match="no topic"):
        write(spark.createDataFrame([("x",)], "body string"), namesrvAddr=servers.namesrv_addr)
    with pytest.raises(Exception, match="option batchSize"):
        write(spark.createDataFrame([("x",)], "body string"), **opts, batchSize="lots")


def test_an_unknown_topic_fails_with_the_name_servers_answer(spark: Any, closed_servers: GatewayServers) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    refusal = r"no broker auto-creates topics, and topic SinkNoSuchTopic is not routed by .*: code 17 TOPIC_NOT_EXIST"
    with pytest.raises(Exception, match=refusal):
        write(df, **options(closed_servers, "SinkNoSuchTopic"))


def test_acl_signs_the_sends_and_a_refusal_carries_the_brokers_code(
    spark: Any,
    acl_servers: GatewayServers,  # noqa: F811
) -> None:
    acl_servers.create_topic("SinkAclTopic", 2)
    df = spark.createDataFrame([(f"secret {i}",) for i in range(50)], "body string")
    app = {"accessKey": APP.access_key, "secretKey": APP.secret_key}
    # Apache's broker answers an ACL refusal with SYSTEM_ERROR, which a producer retries on another broker.
    denied = r"of DeniedTopic failed: code 1 SYSTEM_ERROR: .*AclException: No .*permission.* \(after 3 attempts\)"
    with pytest.raises(Exception, match=denied):
        write(df, **options(acl_servers, "DeniedTopic"), **app)
    with pytest.raises(Exception, match=r"code 1 SYSTEM_ERROR: .*Check signature failed for accessKey=appUser01"):
        write(df, **options(acl_servers, "SinkAclTopic"), accessKey=APP.access_key, secretKey="wrong")
    write(df, **options(acl_servers, "SinkAclTopic"), **app)
    got = read(spark, **options(acl_servers, "SinkAclTopic"), **app)
    assert sorted(r.body for r in got) == sorted(b"secret %d" % i for i in range(50))


def test_tls_options_reach_an_enforcing_mutual_tls_cluster(
    spark: Any,
    tls_servers: GatewayServers,  # noqa: F811
    pki: certs.DevPki,  # noqa: F811
) -> None:
    context = tls_context(pki)
    assert call(tls_servers.broker_addr, create_topic_request("SinkTlsTopic", 2), tls=context).code == 0
    opts = {**options(tls_servers, "SinkTlsTopic"), **pki.client_properties()}
    deadline = time.monotonic() + 10
    while True:  # the broker registers the new topic with the NameServer in the background
        try:
            rq.queues(rq.Settings.from_options(opts))
            break
        except rq.SourceError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    df = spark.createDataFrame([(bytearray(b"\x00tls %d" % i),) for i in range(20)], StructType([
        StructField("body", BinaryType())]))  # fmt: skip
    write(df, **opts)
    assert sorted(r.body for r in read(spark, **opts)) == sorted(b"\x00tls %d" % i for i in range(20))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"topic": "T"}, "namesrvAddr is required"),
        ({"namesrvAddr": "127.0.0.1:1", "topic": "bad topic!"}, "option topic"),
        ({"namesrvAddr": "127.0.0.1:1", "topic": "SCHEDULE_TOPIC_XXXX"}, "forbidden"),
        ({"namesrvAddr": "127.0.0.1:1", "accessKey": "ak"}, "accessKey and secretKey"),
        ({"namesrvAddr": "127.0.0.1:1", "tls.enable": "maybe"}, "tls.enable"),
        ({"namesrvAddr": "127.0.0.1:1", "deliveryGuarantee": "at-most-once"}, "deliveryGuarantee"),
        ({"namesrvAddr": "127.0.0.1:1", "producerGroup": "a b"}, "option producerGroup"),
        ({"namesrvAddr": "127.0.0.1:1", "maxInFlightBatches": "0"}, "maxInFlightBatches: 0 is not between 1 and 64"),
        ({"namesrvAddr": "127.0.0.1:1", "sendTimeoutMs": "soon"}, "sendTimeoutMs: not a number"),
    ],
)
def test_bad_options_name_the_option(given: dict[str, str], message: str) -> None:
    with pytest.raises(sink.SinkError, match=message):
        sink.SinkSettings.from_options(given)


def test_rows_that_cannot_be_messages_fail_the_task_naming_the_row() -> None:
    settings = sink.SinkSettings.from_options({"namesrvAddr": "127.0.0.1:1", "topic": "T"})
    schema = StructType([StructField("body", BinaryType()), StructField("topic", StringType()),
                         StructField("delayTimeLevel", IntegerType()),
                         StructField("properties", MapType(StringType(), StringType()))])  # fmt: skip
    good = Row(body=b"x", topic=None, delayTimeLevel=None, properties={"a": "1"})
    out = list(
        sink.row_messages(settings, schema, [good, Row(body=b"y", topic="U", delayTimeLevel=2, properties=None)])
    )
    assert [(o.message.topic, o.message.body, o.message.properties.get("DELAY")) for o in out] == [
        ("T", b"x", None),
        ("U", b"y", "2"),
    ]
    assert out[0].message.properties["a"] == "1" and out[0].message.properties["UNIQ_KEY"]
    for bad, message in [
        (Row(body=None, topic=None, delayTimeLevel=None, properties=None), "row 1 of the task: column body is null"),
        (Row(body=b"x", topic="no way", delayTimeLevel=None, properties=None), "row 1 of the task: column topic"),
        (Row(body=b"x", topic=None, delayTimeLevel=-1, properties=None), "delayTimeLevel is -1"),
        (Row(body=b"x", topic=None, delayTimeLevel=None, properties={"a": None}), "properties: 'a' has no value"),
        (Row(body=b"x", topic=None, delayTimeLevel=None, properties={"a": "1\x02DELAY\x013"}), r"\\x01 or \\x02"),
    ]:
        with pytest.raises(sink.SinkError, match=message):
            list(sink.row_messages(settings, schema, [good, bad]))


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[tuple[str, dict[str, tuple[Proc, str]]]]:
    """A NameServer and brokers broker-a and broker-b (child processes, with their addresses), with topic
    SinkTwoBrokers on both."""
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    namesrv_conf = {"listenPort": str(ns_port), "bindAddress": "127.0.0.1", "kvConfigPath": str(tmp_path / "kv.json")}
    procs = [Proc("gateway.namesrv", write_properties(tmp_path / "namesrv.properties", namesrv_conf), tmp_path)]
    brokers: dict[str, tuple[Proc, str]] = {}
    try:
        for name in ("broker-a", "broker-b"):
            port = free_port()
            conf = {
                "brokerClusterName": "DefaultCluster", "brokerName": name, "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1", "listenPort": str(port), "namesrvAddr": namesrv,
                "storePathRootDir": str(tmp_path / name), "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
            }  # fmt: skip
            procs.append(Proc("gateway.broker", write_properties(tmp_path / f"{name}.conf", conf), tmp_path))
            addr = f"127.0.0.1:{port}"
            brokers[name] = (procs[-1], addr)
            until(lambda addr=addr: call(addr, create_topic_request("SinkTwoBrokers", 2)).code == 0, 30, name)
        settings = rq.Settings.from_options(options_at(namesrv, "SinkTwoBrokers"))
        until(lambda: routed_queues(settings) == 4, 30, "both brokers routed")
        yield namesrv, brokers
    finally:
        for proc in reversed(procs):
            proc.stop()


def routed_queues(settings: rq.Settings) -> int:
    try:
        return len(rq.queues(settings))
    except rq.TopicNotRouted:  # not registered with the NameServer yet
        return 0


def options_at(namesrv: str, topic: str, **more: str) -> dict[str, str]:
    return {"namesrvAddr": namesrv, "topic": topic, **more}


def test_batches_for_a_silent_broker_go_to_another_but_keyed_rows_fail(
    two_brokers: tuple[str, dict[str, tuple[Proc, str]]],
) -> None:
    namesrv, brokers = two_brokers
    brokers["broker-b"][0].proc.send_signal(signal.SIGSTOP)  # frozen: still routed, connections accepted, no answer
    settings = sink.SinkSettings.from_options(
        options_at(namesrv, "SinkTwoBrokers", batchSize="10", sendTimeoutMs="500")
    )
    schema = StructType([StructField("body", BinaryType()), StructField("shardingKey", StringType())])
    result = sink.AtLeastOnce().write(settings, schema, iter([(b"row %d" % i, None) for i in range(100)]))
    assert result == sink.SentMessages(100, 10)
    assert bodies(brokers["broker-a"][1], "SinkTwoBrokers", 2) == Counter(b"row %d" % i for i in range(100))
    # Keyed rows keep their queue: a key hashed to one of broker-b's (queues 2 and 3 of the 4) cannot move.
    key = next(k for k in (f"k{i}" for i in range(100)) if abs(java_string_hash(k)) % 4 >= 2)
    refused = r"send to broker-b queue \d of SinkTwoBrokers failed: 127\.0\.0\.1:\d+: .*\(after 3 attempts\)"
    with pytest.raises(sink.SinkError, match=refused):
        sink.AtLeastOnce().write(settings, schema, iter([(b"keyed", key)]))
